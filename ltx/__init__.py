"""Comfy-aware LTX adapters between nodes/ and tiling/."""
