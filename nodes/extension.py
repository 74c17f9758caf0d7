"""The pack's ComfyExtension: the list of nodes ComfyUI registers."""

from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from ..ltx.comfy_internals import load_report
from .multigpu_launcher import MultiGPULauncherNode
from .sequence_parallel import SequenceParallelNode
from .tdp_patcher import TDPModelPatcherNode
from .tile_config import BalancedTileConfigNode, TileCountConfigNode, TileSizeConfigNode
from .tile_preview import TilePreviewNode
from .tiled_vae_decode import TiledVAEDecodeNode


class TDPExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        load_report()  # one line per ComfyUI internal that changed, naming the nodes it stops
        return [TileCountConfigNode, BalancedTileConfigNode, TileSizeConfigNode, TDPModelPatcherNode, TilePreviewNode,
                TiledVAEDecodeNode, MultiGPULauncherNode, SequenceParallelNode]
