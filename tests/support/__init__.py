"""Test support: tiny real models, the in-process ComfyUI runtime and the headless server."""
