"""The pack's own socket types."""

from comfy_api.latest import io

TILING = io.Custom("LTX_TDP_TILING")
"""A tiling.TilingConfig: tile counts and overlaps per latent axis (TileCountConfig) or largest tile sizes and
smallest overlaps (TileSizeConfig), which resolve to tile counts on the actual latent."""

TDP_GROUP = io.Custom("LTX_TDP_GROUP")
"""A running multi-GPU worker group (multigpu.group.TDPGroup)."""

CATEGORY = "LTX/TDP"
