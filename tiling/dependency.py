"""Which positions of a layer stack's input each output position depends on, along one axis (pure arithmetic).

A stack is a sequence of axis ops, each with an exact dependency rule on a grid of a known length:

* `Neighbourhood(k)`: neighbourhood attention (NATTEN semantics). On a grid of n positions query i reads the
  k positions starting at min(max(i - k//2, 0), n - k): a neighbourhood centred on i, shifted inward at the
  grid's edges (k clamped to n). ("Window" in this pack means only a blend weight, `tiling.windows`.)
* `Upsample(s, drop)`: a per-position linear map followed by a pixel shuffle of stride s; with `drop` the
  shuffle's first output is dropped when the block holds the grid's origin (LTX's causal time axis). Output j
  reads input (j + drop) // s; n inputs give n*s - drop outputs.
* `PadEnd(m)`: m copies of the last position appended (output j >= n reads n - 1).
* `CropEnd(m)`: the last m positions cut off.
* `Conv(b, a)`: a convolution padded to keep the grid's length (LTX's conv decoders): output i reads inputs
  [i - b, i + a], clamped to the grid (its padding repeats or reflects positions inside that range).

Per-position layers (linear maps, norms over channels) read only their own position and need no op.

Positions are ranges [first, last] with both ends included (`Span`), as dependencies are; a tile's own range
is the half-open `tiling.Interval`. `needed` walks a stack backwards: the input span an output span depends on,
on the full grid. `computed` walks it forwards: what a block cut from the input computes, in full-grid
coordinates, and whether it holds the origin / the end at each op (so it drops and pads as the full decode does
there).

Invariant (why a block equals the full computation): an op evaluated on a block that covers the full-grid
dependency of an interval gives the full grid's values on that interval. For `Neighbourhood` that holds because
a full-grid neighbourhood lying inside the block is the block's own clamped neighbourhood too (its start is clamped the same
way only when the block reaches the grid's edge). So a block that covers `needed(ops, n, lo, hi)` computes
outputs [lo, hi] exactly.

`axis_reach` reads a stack's reach off these rules: around an interior input cell, how many cells its outputs
depend on and how many outputs it changes (`DecoderReach`: along time and space, a whole decoder's).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Union

from .geometry import AxisScale


class Span(NamedTuple):
    """Positions [first, last] of one axis, both included."""

    first: int
    last: int


@dataclass(frozen=True)
class Neighbourhood:
    kernel: int

    def length(self, n: int) -> int:
        return n

    def reads(self, n: int, lo: int, hi: int) -> Span:
        k = min(self.kernel, n)
        start = lambda i: min(max(i - k // 2, 0), n - k)  # noqa: E731 (non-decreasing in i)
        return Span(start(lo), start(hi) + k - 1)

    def forward(self, n: int, lo: int, hi: int) -> Span:
        return Span(lo, hi)


@dataclass(frozen=True)
class Upsample:
    stride: int
    drop: int = 0

    def length(self, n: int) -> int:
        return n * self.stride - self.drop

    def reads(self, n: int, lo: int, hi: int) -> Span:
        return Span((lo + self.drop) // self.stride, (hi + self.drop) // self.stride)

    def forward(self, n: int, lo: int, hi: int) -> Span:
        s = self.stride
        return Span(0 if lo == 0 else lo * s - self.drop, hi * s + s - 1 - self.drop)


@dataclass(frozen=True)
class PadEnd:
    count: int

    def length(self, n: int) -> int:
        return n + self.count

    def reads(self, n: int, lo: int, hi: int) -> Span:
        return Span(min(lo, n - 1), min(hi, n - 1))

    def forward(self, n: int, lo: int, hi: int) -> Span:
        return Span(lo, hi + self.count if hi == n - 1 else hi)


@dataclass(frozen=True)
class CropEnd:
    count: int

    def length(self, n: int) -> int:
        return n - self.count

    def reads(self, n: int, lo: int, hi: int) -> Span:
        return Span(lo, hi)

    def forward(self, n: int, lo: int, hi: int) -> Span:
        return Span(min(lo, n - self.count - 1), min(hi, n - self.count - 1))


@dataclass(frozen=True)
class Conv:
    before: int
    after: int

    def length(self, n: int) -> int:
        return n

    def reads(self, n: int, lo: int, hi: int) -> Span:
        return Span(max(lo - self.before, 0), min(hi + self.after, n - 1))

    def forward(self, n: int, lo: int, hi: int) -> Span:
        return Span(lo, hi)


AxisOp = Union[Neighbourhood, Upsample, PadEnd, CropEnd, Conv]


def lengths(ops: Sequence[AxisOp], n: int) -> list[int]:
    """Grid length at the input of every op, then at the output: len(ops) + 1 entries."""
    out = [int(n)]
    for op in ops:
        out.append(op.length(out[-1]))
        if out[-1] < 1:
            raise ValueError(f"{op} leaves no position of a grid of {out[-2]}")
    return out


def needed(ops: Sequence[AxisOp], n: int, lo: int, hi: int) -> Span:
    """The input positions that outputs [lo, hi] of `ops` on an input grid of `n` read."""
    sizes = lengths(ops, n)
    if not 0 <= lo <= hi < sizes[-1]:
        raise ValueError(f"outputs [{lo}, {hi}] are not inside a grid of {sizes[-1]}")
    span = Span(lo, hi)
    for op, size in zip(reversed(ops), reversed(sizes[:-1])):
        span = op.reads(size, *span)
    return span


def computed(ops: Sequence[AxisOp], n: int, lo: int, hi: int) -> list[Span]:
    """The full-grid positions that a block holding inputs [lo, hi] has at the input of every op,
    then at the output (a block that starts at 0 holds the origin: it drops there; one that ends at n - 1
    holds the end: it pads there)."""
    sizes = lengths(ops, n)
    spans = [Span(lo, hi)]
    for op, size in zip(ops, sizes[:-1]):
        spans.append(op.forward(size, *spans[-1]))
    return spans


def dependents(ops: Sequence[AxisOp], n: int, position: int) -> Span:
    """The outputs of `ops` on an input grid of `n` that read input `position`.

    Every op's reads are non-decreasing in the output, so the outputs reading one input are one span: its
    ends are found by bisection over `needed`.
    """
    outputs = range(lengths(ops, n)[-1])
    first = bisect.bisect_left(outputs, position, key=lambda o: needed(ops, n, o, o).last)
    last = bisect.bisect_right(outputs, position, key=lambda o: needed(ops, n, o, o).first) - 1
    if first > last:
        raise ValueError(f"no output of {len(ops)} ops reads input {position} of a grid of {n}")
    return Span(first, last)


@dataclass(frozen=True)
class AxisReach:
    """Reach of a stack along one axis around an interior input cell, in cells and outputs (pixels).

    `before` / `after`: cells before the cell and after it that the outputs it owns depend on: the context a
    tile needs on each side to be exact. `pixels_before` / `pixels_after`: how many outputs before and after
    its own that one cell changes.
    """

    before: int
    after: int
    pixels_before: int
    pixels_after: int

    @property
    def context(self) -> int:
        """Cells of context on both sides that make a tile exact."""
        return max(self.before, self.after)


@dataclass(frozen=True)
class DecoderReach:
    """A video decoder's reach along time and space (height and width have the same layers in LTX decoders)."""

    time: AxisReach
    space: AxisReach

    @property
    def context(self) -> tuple[int, int]:
        """(time, space) cells of context on both sides that make a tile exact."""
        return self.time.context, self.space.context


def axis_reach(ops: Sequence[AxisOp], causal: bool, cells: int = 512) -> AxisReach:
    """The reach of `ops` around the middle cell of an input grid of `cells`, far from both ends (nothing is
    clamped there). A cell owns the outputs `AxisScale(factor, causal)` gives it, the factor being the product
    of the upsamplers' strides (`causal`: the first cell owns one output, LTX's time axis)."""
    scale = AxisScale(math.prod(op.stride for op in ops if isinstance(op, Upsample)), causal)
    cell = cells // 2
    owned = scale.owned_pixels(cell, cell + 1)
    first, last = owned.start, owned.end - 1
    touched = dependents(ops, cells, cell)
    return AxisReach(cell - needed(ops, cells, first, first).first, needed(ops, cells, last, last).last - cell,
                     first - touched.first, touched.last - last)
