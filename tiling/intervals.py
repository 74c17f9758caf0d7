"""Splitting one axis into overlapping intervals whose trapezoid windows sum to exactly one.

The split-by-count arithmetic is upstream LTX-2's (`ltx_core/tiling.py`, see `split_by_count`); the validation is ours: a layout whose
windows would not sum to one is refused instead of being blended with brightened seams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import TilingError


@dataclass(frozen=True)
class Interval:
    """Half-open [start, end) on one axis, with the ramp lengths of its blend window at each end."""

    start: int
    end: int
    ramp_in: int = 0
    ramp_out: int = 0

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def slice(self) -> slice:
        return slice(self.start, self.end)


def max_valid_overlap(length: int, tiles: int) -> int:
    """Largest overlap for which `tiles` tiles on `length` cells still blend exactly (-1 if none).

    Invariant: `split_by_count(length, tiles, result)` is accepted and, for more than one tile, no larger
    overlap is (one tile has nothing to overlap: any overlap is accepted and 0 is returned).
    """
    if tiles < 1 or tiles > length:
        return -1
    if tiles == 1:
        return 0
    accepted = [ov for ov in range(0, length) if _count_split_problem(length, tiles, ov) is None]
    return max(accepted, default=-1)


def _raw_count_split(length: int, tiles: int, overlap: int) -> list[tuple[int, int]]:
    total = length + overlap * (tiles - 1)
    size, rem = divmod(total, tiles)
    out = []
    for i in range(tiles):
        start = i * (size - overlap) + min(i, rem)
        out.append((start, start + size + (1 if i < rem else 0)))
    return out


def _count_split_problem(length: int, tiles: int, overlap: int) -> str | None:
    """Why this split cannot blend exactly, or None when it can."""
    if tiles < 1:
        return "needs at least 1 tile"
    if overlap < 0:
        return "overlap cannot be negative"
    if tiles > length:
        return f"cannot take {tiles} tiles (more tiles than cells)"
    if tiles == 1:
        return None  # one tile is the whole axis; its overlap has nothing to overlap with
    spans = _raw_count_split(length, tiles, overlap)
    for i, (start, end) in enumerate(spans):
        need = overlap * (2 if 0 < i < tiles - 1 else 1)
        # Every tile must hold its ramps without them meeting a third tile's ramp; the last one must end
        # exactly at `length`, and neighbours must overlap by exactly `overlap`.
        if end - start <= overlap or end - start < need:
            return "interior tile shorter than twice the overlap"
    if spans[-1][1] != length or spans[0][0] != 0:
        return "tiles do not cover the axis"
    return None


def split_by_count(length: int, tiles: int, overlap: int, axis: str = "axis") -> tuple[Interval, ...]:
    """Split [0, length) into `tiles` intervals, neighbours overlapping by exactly `overlap` cells.

    Intervals are upstream's: total = length + overlap*(tiles-1), s = total // tiles, r = total % tiles,
    tile i starts at i*(s-overlap) + min(i, r) and is s (+1 if i < r) long. Every accepted layout's
    trapezoid windows sum to exactly one at every cell; any other layout raises TilingError naming the
    axis, its length and the largest overlap that works.
    """
    problem = _count_split_problem(length, tiles, overlap)
    if problem is not None:
        raise TilingError(_refusal(axis, length, tiles, overlap, problem))
    if tiles == 1:
        return (Interval(0, length, 0, 0),)
    spans = _raw_count_split(length, tiles, overlap)
    return tuple(
        Interval(start, end, overlap if i > 0 else 0, overlap if i < tiles - 1 else 0)
        for i, (start, end) in enumerate(spans)
    )


def tiles_for_size(length: int, tile_size: int, overlap: int, axis: str = "axis") -> int:
    """Fewest tiles of at most `tile_size` cells (neighbours overlapping by `overlap`) covering `length`."""
    if tile_size < 1:
        raise TilingError(f"{axis}: tile size must be at least 1, got {tile_size}")
    if overlap < 0:
        raise TilingError(f"{axis}: overlap cannot be negative, got {overlap}")
    if length <= tile_size:
        return 1
    if 2 * overlap >= tile_size:
        raise TilingError(
            f"{axis}: a tile of {tile_size} cannot hold an overlap of {overlap} at both ends; "
            f"use an overlap of at most {(tile_size - 1) // 2} or a larger tile"
        )
    return math.ceil((length - overlap) / (tile_size - overlap))


def split_by_size(length: int, tile_size: int, overlap: int, axis: str = "axis") -> tuple[Interval, ...]:
    """Split [0, length) into the fewest tiles of at most `tile_size` cells, blended exactly.

    Uses upstream's even split-by-count when that blends exactly; otherwise (its interior tiles would be
    shorter than twice the overlap) the cells are taken from the longest tiles first, so end tiles may be
    shorter than interior ones. Neighbours always overlap by exactly `overlap`.
    """
    tiles = tiles_for_size(length, tile_size, overlap, axis)
    if tiles == 1:
        return (Interval(0, length, 0, 0),)
    if _count_split_problem(length, tiles, overlap) is None:
        return split_by_count(length, tiles, overlap, axis)
    minimum = [overlap + 1] + [2 * overlap] * (tiles - 2) + [overlap + 1]
    lengths = [tile_size] * tiles
    excess = tiles * tile_size - (length + (tiles - 1) * overlap)
    while excess > 0:
        i = max(range(tiles), key=lambda k: (lengths[k] - minimum[k], -k))
        if lengths[i] <= minimum[i]:
            raise TilingError(f"{axis}: {length} cells cannot be split into tiles of {tile_size} with overlap {overlap}")
        lengths[i] -= 1
        excess -= 1
    out, start = [], 0
    for i, n in enumerate(lengths):
        out.append(Interval(start, start + n, overlap if i > 0 else 0, overlap if i < tiles - 1 else 0))
        start += n - overlap
    return tuple(out)


def count_for_size(length: int, size: int, min_overlap: int, axis: str = "axis") -> tuple[int, int]:
    """The (tiles, overlap) of the count split that cuts [0, length) into tiles of at most `size` cells whose
    neighbours overlap by at least `min_overlap`: the fewest tiles, then the largest overlap.

    Invariant: `split_by_count(length, tiles, overlap)` is accepted (its windows sum to exactly one), none of
    its intervals is longer than `size`, and `overlap >= min_overlap`; no smaller count admits such an overlap
    and, with this count, no larger overlap does. So the tiles are as close to `size` as the blend allows. An
    axis that fits one tile (length <= size) is one tile, reported with `min_overlap` (it has nothing to
    overlap). Raises TilingError, naming what would work, when the tile cannot hold the overlap at both ends
    (size <= 2 * min_overlap) or no count split of this length meets both bounds.
    """
    problem = _size_problem(length, size, min_overlap)
    if problem is not None:
        raise TilingError(_size_refusal(axis, length, size, min_overlap, problem))
    if length <= size:
        return 1, min_overlap
    tiles = tiles_for_size(length, size, min_overlap, axis)
    return tiles, min((tiles * size - length) // (tiles - 1), max_valid_overlap(length, tiles))


_TOO_SHORT = "the tile is too short for its overlap"
_NO_SPLIT = "no count split blends exactly"


def _size_problem(length: int, size: int, min_overlap: int) -> str | None:
    """Why no count split meets (size, min_overlap) on `length` cells, or None when one does.

    With the fewest tiles n that reach `length`, overlap `min_overlap` keeps every tile within `size`; a larger
    overlap or more tiles only make interior tiles shorter against their ramps, so when n tiles at `min_overlap`
    do not blend exactly, no count split does (tests/tiling/test_count_for_size.py checks this by brute force).
    """
    if length < 1:
        return "the axis has no cells"
    if size < 1:
        return "the tile size must be at least 1 cell"
    if min_overlap < 0:
        return "the overlap cannot be negative"
    if length <= size:
        return None
    if 2 * min_overlap >= size:
        return _TOO_SHORT
    if _count_split_problem(length, tiles_for_size(length, size, min_overlap), min_overlap) is not None:
        return _NO_SPLIT
    return None


def _size_refusal(axis: str, length: int, size: int, min_overlap: int, problem: str) -> str:
    if problem not in (_TOO_SHORT, _NO_SPLIT):
        return f"{axis}: {problem} (length {length}, tile size {size}, minimum overlap {min_overlap})"
    smaller = next((m for m in range(min_overlap - 1, -1, -1) if _size_problem(length, size, m) is None), 0)
    larger = next(s for s in range(size + 1, length + 1) if _size_problem(length, s, min_overlap) is None)
    if problem == _TOO_SHORT:
        why = f"a tile of {size} cells cannot hold an overlap of {min_overlap} at both ends"
    else:
        why = (f"{length} latent cells cannot be cut into tiles of at most {size} cells overlapping by at least "
               f"{min_overlap} that blend exactly (an interior tile would be shorter than twice the overlap)")
    return f"{axis}: {why}; use a minimum overlap of at most {smaller} or tiles of at least {larger} cells"


def _refusal(axis: str, length: int, tiles: int, overlap: int, problem: str) -> str:
    if tiles < 1:
        return f"{axis}: the tile count must be at least 1, got {tiles}"
    if overlap < 0:
        return f"{axis}: the overlap cannot be negative, got {overlap}"
    if tiles > length:
        return (
            f"{axis}: {length} latent cells cannot take {tiles} tiles; use at most {length} tiles "
            f"(fewer for a useful overlap)"
        )
    best = max_valid_overlap(length, tiles)
    if best < 0:
        return f"{axis}: {length} latent cells cannot take {tiles} tiles with any overlap; use fewer tiles"
    return (
        f"{axis}: {length} latent cells cannot take {tiles} tiles with overlap {overlap}; "
        f"the largest overlap that keeps the blend exact is {best}"
    )
