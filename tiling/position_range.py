"""The position range an LTX transformer was trained on, and which tiles leave it.

LTX's RoPE divides each token's position by the model's `positional_embedding_max_pos`: [seconds, px, px]
([20, 2048, 2048] for LTX-2's published checkpoints; a checkpoint's metadata may set others). A tile longer or
larger than that puts positions above 1, outside what the model saw in training. The values are read from the
loaded model (ltx.model.facts.position_range); nothing here assumes them. `PositionRange.check` is the one check
of a tile plan against them (the patcher, the balanced tile config and the tile preview word it each their way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .geometry import LTX_GEOMETRY, LatentGeometry
from .plan import TilePlan


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

    def check(self, plan: TilePlan, frame_rate: float | None = None,
              geometry: LatentGeometry = LTX_GEOMETRY) -> str | None:
        """None when the largest tile of `plan` is inside this range, else "outside the model's trained position
        range (...)" naming each axis it leaves (`excess`; time only with a `frame_rate`)."""
        excess = self.excess(largest_tile(plan), frame_rate, geometry)
        return f"outside the model's trained position range ({', '.join(excess)})" if excess else None


def largest_tile(plan: TilePlan) -> tuple[int, ...]:
    """(frames, height, width) latent cells of the largest tile of `plan`."""
    return tuple(max(i.length for i in axis) for axis in plan.axis_intervals)
