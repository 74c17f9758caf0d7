"""Pure-torch tiling core: configs, interval splits, windows, tile plans, the blend loop, token selection.

Nothing here imports ComfyUI; the patcher adapter, the multi-GPU ranks and the tiled VAE decode use it.
"""

from .blend import blend_tiles
from .config import AXES, AxisTileSize, AxisTiling, TileCountConfig, balanced_split
from .errors import TilingError
from .intervals import Interval, max_valid_overlap, split_by_count, split_by_size, tiles_for_size
from .plan import Tile, TilePlan, owner_of, plan_tiles
from .tokens import conditioning_keep_mask, conditioning_weights
from .windows import window_1d, window_nd

__all__ = [
    "AXES", "AxisTileSize", "AxisTiling", "Interval", "Tile", "TileCountConfig", "TilePlan", "TilingError",
    "balanced_split", "blend_tiles", "conditioning_keep_mask", "conditioning_weights", "max_valid_overlap",
    "owner_of", "plan_tiles", "split_by_count", "split_by_size", "tiles_for_size", "window_1d", "window_nd",
]
