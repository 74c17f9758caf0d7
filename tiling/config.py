"""Frozen tile configurations: by tile count (`TileCountConfig`) or by tile size (`TileSizeConfig`).

Both are a `TilingConfig`: per axis a spec whose `intervals(length)` the patcher, the tile preview and the
multi-GPU jobs plan with. A size config resolves, once the latent is known, to the count config it equals
(`resolve`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import TilingError
from .geometry import LTX_GEOMETRY, VIDEO_AXES, LatentGeometry
from .intervals import Interval, count_for_size, split_by_count, split_by_size


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
    """Largest tile size and overlap along one axis (cells of whatever grid it is applied to).

    By default `overlap` is exact: the fewest tiles of at most `size` cells whose neighbours overlap by exactly
    `overlap`, end tiles shorter where an even split would not blend (`split_by_size`; the tiled VAE decode).
    With `overlap_is_minimum` it is a lower bound: the axis is the count split `AxisTiling(*self.counts(length))`,
    the fewest tiles, overlapping as much as keeps every tile within `size` (`count_for_size`; the tile-size
    config of the model patcher, whose tiles are then what the count config gives).
    """

    size: int
    overlap: int = 0
    overlap_is_minimum: bool = False

    def counts(self, length: int, axis: str = "axis") -> "AxisTiling":
        """The count tiling this size resolves to on `length` cells (`overlap_is_minimum` only)."""
        if not self.overlap_is_minimum:
            raise ValueError("an exact-overlap tile size can split unevenly, which no tile count gives")
        return AxisTiling(*count_for_size(length, self.size, self.overlap, axis))

    def intervals(self, length: int, axis: str = "axis") -> tuple[Interval, ...]:
        """The fewest tiles of at most `size` cells covering [0, length), blended exactly."""
        if self.overlap_is_minimum:
            return self.counts(length, axis).intervals(length, axis)
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

    def resolve(self, shape: Sequence[int]) -> "TileCountConfig":
        """The count config of a (frames, height, width) latent: this one."""
        return self


@dataclass(frozen=True)
class TileSizeConfig:
    """Largest tile size per axis in latent cells, with a minimum overlap: IC-LoRAs are trained on fixed windows.

    Each axis is an `AxisTileSize` with `overlap_is_minimum`, or `AxisTiling()` (one tile: the whole axis). On a
    latent of shape (frames, height, width) it is exactly `resolve(shape)`, the count config whose every axis is
    `split_by_count(length, n, ov)` with the fewest tiles n of at most the size and the largest overlap
    ov >= the minimum that keeps them within it (tiling.intervals.count_for_size).
    """

    frames: AxisTiling | AxisTileSize = AxisTiling()
    height: AxisTiling | AxisTileSize = AxisTiling()
    width: AxisTiling | AxisTileSize = AxisTiling()

    @classmethod
    def of_pixels(cls, width_px: int, height_px: int, min_overlap: int, frames: int = 0, min_frames_overlap: int = 0,
                  geometry: LatentGeometry = LTX_GEOMETRY) -> "TileSizeConfig":
        """Tiles of at most `width_px` x `height_px` pixels (and `frames` video frames; 0: the whole clip), whose
        neighbours overlap by at least `min_overlap` latent cells in space and `min_frames_overlap` latent frames
        in time. A tile of n cells spans at most n x the axis' factor pixels (frames), so sizes round down to
        whole cells. Raises TilingError for a size below one cell or not longer than twice its overlap."""
        axes = []
        for name, unit, value, overlap, scale in (("frames", "frames", frames, min_frames_overlap, geometry.frames),
                                                  ("height", "px", height_px, min_overlap, geometry.height),
                                                  ("width", "px", width_px, min_overlap, geometry.width)):
            if name == "frames" and value == 0:
                axes.append(AxisTiling())
                continue
            axes.append(_size_of(name, unit, int(value), int(overlap), scale.factor))
        return cls(*axes)

    @property
    def axes(self) -> tuple[AxisTiling | AxisTileSize, AxisTiling | AxisTileSize, AxisTiling | AxisTileSize]:
        return (self.frames, self.height, self.width)

    def resolve(self, shape: Sequence[int]) -> TileCountConfig:
        """The count config this size config equals on a (frames, height, width) latent of `shape`."""
        counts = [a.counts(int(n), name) if isinstance(a, AxisTileSize) else a
                  for a, n, name in zip(self.axes, shape, VIDEO_AXES)]
        return TileCountConfig(*counts)

    def describe(self) -> str:
        return " x ".join(f"{name} at most {a.size} cells (overlap at least {a.overlap})"
                          if isinstance(a, AxisTileSize) else f"{name} whole"
                          for name, a in zip(VIDEO_AXES, self.axes))


def _size_of(axis: str, unit: str, value: int, overlap: int, factor: int) -> AxisTileSize:
    """A tile size in `unit`s (pixels or frames) as whole latent cells of `factor` units, checked against its
    minimum overlap in cells."""
    if overlap < 0:
        raise TilingError(f"{axis}: the minimum overlap cannot be negative, got {overlap}")
    cells = value // factor
    if cells < 1:
        raise TilingError(f"{axis}: a tile of {value} {unit} is less than one latent cell ({factor} {unit}); use at "
                          f"least {factor} {unit}")
    if cells <= 2 * overlap:
        raise TilingError(
            f"{axis}: a tile of {value} {unit} is {cells} latent cell(s) of {factor} {unit}, too short for a minimum "
            f"overlap of {overlap} cells at both ends; use tiles of at least {(2 * overlap + 1) * factor} {unit} or "
            f"a minimum overlap of at most {(cells - 1) // 2}")
    return AxisTileSize(cells, overlap, overlap_is_minimum=True)


TilingConfig = TileCountConfig | TileSizeConfig
"""What an `LTX_TDP_TILING` socket carries: per axis an `intervals(length, axis)` spec (`axes`), `resolve(shape)`
to the count config it equals on a latent, and `describe()`."""


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
