"""LTX Tiled Data Parallel for ComfyUI.

ComfyUI loads this file from custom_nodes/ and calls `comfy_entrypoint()`. Nothing heavy happens at
import: the node modules are imported when ComfyUI asks for the node list.
"""

from __future__ import annotations


async def comfy_entrypoint():
    """ComfyUI's V3 entry point: the pack's extension with its node list."""
    from .nodes.extension import TDPExtension

    return TDPExtension()
