"""ComfyUI nodes of the pack: each module declares one node's schema and calls into the layers below."""
