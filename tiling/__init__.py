"""Pure-torch tiling core: configs, interval splits, windows, tile plans, the one blend loop, the ranks that
share a loop's tiles, LTX's latent geometry, decode plans, token selection and the tile preview.

Nothing here imports ComfyUI; the model patcher, the multi-GPU ranks and the tiled VAE decode use it.
"""

from .blend import add_tile, blend_tiles, exact_sum_dtype
from .config import AxisTileSize, AxisTiling, TileCountConfig, TileSizeConfig, TilingConfig, balanced_split
from .errors import TilingError
from .geometry import LTX_GEOMETRY, VIDEO_AXES, AxisScale, LatentGeometry, video_grid_shape, video_part
from .intervals import Interval, count_for_size, max_valid_overlap, split_by_count, split_by_size, tiles_for_size
from .plan import Tile, TilePlan, owner_of, plan_tiles
from .position_range import PositionRange
from .tokens import conditioning_keep_mask, conditioning_weights
from .windows import window_1d, window_nd

__all__ = [
    "LTX_GEOMETRY", "VIDEO_AXES", "AxisScale", "AxisTileSize", "AxisTiling", "Interval", "LatentGeometry",
    "PositionRange", "Tile", "TileCountConfig", "TilePlan", "TileSizeConfig", "TilingConfig", "TilingError", "balanced_split",
    "add_tile", "blend_tiles", "conditioning_keep_mask", "conditioning_weights", "count_for_size", "exact_sum_dtype",
    "max_valid_overlap", "owner_of", "plan_tiles", "split_by_count", "split_by_size", "tiles_for_size",
    "video_grid_shape", "video_part", "window_1d", "window_nd",
]
