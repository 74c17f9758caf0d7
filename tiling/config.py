"""Frozen tile configurations. Both kinds resolve to the same `Interval` tuples per axis."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .geometry import VIDEO_AXES
from .intervals import Interval, split_by_count, split_by_size


@dataclass(frozen=True)
class AxisTiling:
    """Tile count and overlap along one latent axis (latent cells)."""

    tiles: int = 1
    overlap: int = 0

    def intervals(self, length: int, axis: str = "axis") -> tuple[Interval, ...]:
        """Split [0, length) into `tiles` intervals whose trapezoid windows sum to exactly 1.

        Raises TilingError naming the largest overlap that would work when they cannot.
        """
        return split_by_count(length, self.tiles, self.overlap, axis)


@dataclass(frozen=True)
class AxisTileSize:
    """Largest tile size and overlap along one axis (cells of whatever grid it is applied to)."""

    size: int
    overlap: int = 0

    def intervals(self, length: int, axis: str = "axis") -> tuple[Interval, ...]:
        """The fewest tiles of at most `size` cells covering [0, length), blended exactly."""
        return split_by_size(length, self.size, self.overlap, axis)


AxisSpec = AxisTiling | AxisTileSize


@dataclass(frozen=True)
class TileCountConfig:
    """Tile counts and overlaps for the (frames, height, width) axes of a video latent."""

    frames: AxisTiling = AxisTiling()
    height: AxisTiling = AxisTiling()
    width: AxisTiling = AxisTiling()

    @property
    def axes(self) -> tuple[AxisTiling, AxisTiling, AxisTiling]:
        return (self.frames, self.height, self.width)

    @property
    def tile_count(self) -> int:
        return self.frames.tiles * self.height.tiles * self.width.tiles

    def describe(self) -> str:
        return " x ".join(f"{name} {a.tiles} (overlap {a.overlap})" for name, a in zip(VIDEO_AXES, self.axes))


def balanced_split(ranks: int, height: int | None = None, width: int | None = None) -> tuple[int, int]:
    """(height tiles, width tiles) whose product is exactly `ranks`.

    Without a latent size this is upstream's rule: the largest divisor of `ranks` not above its square
    root goes to the height. With one, the factor pair whose tiles come out closest to square is chosen
    (ties go to upstream's choice), so a landscape video gets more width tiles than height tiles.
    """
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    small = max(d for d in range(1, math.isqrt(ranks) + 1) if ranks % d == 0)
    upstream = (small, ranks // small)
    if not height or not width:
        return upstream
    pairs = [(d, ranks // d) for d in range(1, ranks + 1) if ranks % d == 0]
    pairs = [(h, w) for h, w in pairs if h <= height and w <= width] or [upstream]

    def squareness(pair: tuple[int, int]) -> tuple[float, int]:
        h, w = pair
        return (abs(math.log((height / h) / (width / w))), 0 if pair == upstream else 1)

    return min(pairs, key=squareness)
