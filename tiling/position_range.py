"""The position range an LTX transformer was trained on, and which tiles leave it.

LTX's RoPE divides each token's position by the model's `positional_embedding_max_pos`: [seconds, px, px]
([20, 2048, 2048] for LTX-2's published checkpoints; a checkpoint's metadata may set others). A tile longer or
larger than that puts positions above 1, outside what the model saw in training. The values are read from the
loaded model (ltx.model.facts.position_range); nothing here assumes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .geometry import LTX_GEOMETRY, LatentGeometry


@dataclass(frozen=True)
class PositionRange:
    """A model's `positional_embedding_max_pos`: time in seconds, height and width in pixels."""

    seconds: float
    height_px: float
    width_px: float

    @classmethod
    def of_max_pos(cls, max_pos: Sequence[float]) -> "PositionRange":
        """From a model's (time, height, width) `positional_embedding_max_pos`."""
        t, h, w = (float(v) for v in max_pos)
        return cls(t, h, w)

    def excess(self, tile_cells: Sequence[int], frame_rate: float | None = None,
               geometry: LatentGeometry = LTX_GEOMETRY) -> list[str]:
        """Each axis on which a tile of (frames, height, width) latent cells leaves this range, as text a user
        can read (empty when the tile is in range). Time is checked only with a `frame_rate`."""
        frames, height, width = geometry.pixel_shape(tile_cells)
        out = []
        if height > self.height_px:
            out.append(f"height {height} px > {self.height_px:g} px")
        if width > self.width_px:
            out.append(f"width {width} px > {self.width_px:g} px")
        if frame_rate and frames / frame_rate > self.seconds:
            out.append(f"length {frames / frame_rate:.1f} s > {self.seconds:g} s")
        return out


def largest_tile(plan_axes: Sequence[Sequence[object]]) -> tuple[int, ...]:
    """(frames, height, width) latent cells of the largest tile of a plan's per-axis intervals."""
    return tuple(max(i.length for i in axis) for axis in plan_axes)
