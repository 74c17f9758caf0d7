"""A tile plan: the intervals of every axis, the tiles they make, and which rank runs which tile."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import AxisSpec
from .errors import TilingError
from .intervals import Interval
from .windows import window_nd


@dataclass(frozen=True)
class Tile:
    """One tile: its index in enumeration order and its interval on every tiled axis."""

    index: int
    intervals: tuple[Interval, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(i.length for i in self.intervals)

    @property
    def slices(self) -> tuple[slice, ...]:
        return tuple(i.slice for i in self.intervals)

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(i.start for i in self.intervals)

    def window(self, device: torch.device | str | None = None) -> torch.Tensor:
        """fp32 blend weights of this tile, shape `self.shape`."""
        return window_nd(self.intervals, device)


@dataclass(frozen=True)
class TilePlan:
    """Tiles over a grid of `shape`, enumerated with the first axis slowest and the last fastest.

    For a (frames, height, width) grid: i = (f * nH + h) * nW + w.
    """

    shape: tuple[int, ...]
    axis_intervals: tuple[tuple[Interval, ...], ...]

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axis_intervals)

    @functools.cached_property
    def tiles(self) -> tuple[Tile, ...]:
        return tuple(
            Tile(index, combo) for index, combo in enumerate(itertools.product(*self.axis_intervals))
        )

    def __len__(self) -> int:
        n = 1
        for c in self.counts:
            n *= c
        return n

    def tiles_for_rank(self, rank: int = 0, world: int = 1) -> tuple[Tile, ...]:
        """Round-robin share of `rank`: tiles whose index % world == rank (possibly none)."""
        return tuple(t for t in self.tiles if owner_of(t.index, world) == rank)

    def weight_sum(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Sum of every tile's window over the grid; exactly 1 everywhere (to fp32 rounding)."""
        acc = torch.zeros(self.shape, dtype=torch.float32, device=device)
        for tile in self.tiles:
            acc[tile.slices] += tile.window(device)
        return acc


def owner_of(tile_index: int, world: int) -> int:
    """The rank that runs tile `tile_index` when `world` ranks share the tiles round-robin."""
    if world < 1:
        raise ValueError(f"world size must be at least 1, got {world}")
    return tile_index % world


def plan_tiles(shape: Sequence[int], specs: Sequence[AxisSpec], names: Sequence[str]) -> TilePlan:
    """Validate `specs` against the actual grid `shape` and build its plan.

    Raises TilingError (naming the axis, its length and the largest overlap that works) for any layout
    whose windows would not sum to exactly one.
    """
    if not (len(shape) == len(specs) == len(names)):
        raise TilingError(f"expected {len(names)} axes {tuple(names)}, got a grid of shape {tuple(shape)}")
    intervals = tuple(spec.intervals(int(n), name) for spec, n, name in zip(specs, shape, names))
    return TilePlan(tuple(int(n) for n in shape), intervals)
