"""The pack's own socket types."""

from comfy_api.latest import io

TILING = io.Custom("LTX_TDP_TILING")
"""A tiling.TileCountConfig: tile counts and overlaps per latent axis."""

TDP_GROUP = io.Custom("LTX_TDP_GROUP")
"""A running multi-GPU worker group (multigpu.group.TDPGroup)."""

CATEGORY = "LTX/TDP"
