"""Which positions of a layer stack's input each output position depends on, along one axis (pure arithmetic).

A stack is a sequence of axis ops, each with an exact dependency rule on a grid of a known length:

* `Window(k)`: neighbourhood attention (NATTEN semantics). On a grid of n positions query i reads the k
  positions starting at min(max(i - k//2, 0), n - k): a window centred on i, shifted inward at the grid's
  edges (k clamped to n).
* `Upsample(s, drop)`: a per-position linear map followed by a pixel shuffle of stride s; with `drop` the
  shuffle's first output is dropped when the block holds the grid's origin (LTX's causal time axis). Output j
  reads input (j + drop) // s; n inputs give n*s - drop outputs.
* `PadEnd(m)`: m copies of the last position appended (output j >= n reads n - 1).
* `CropEnd(m)`: the last m positions cut off.

Per-position layers (linear maps, norms over channels) read only their own position and need no op.

`needed` walks a stack backwards: the input interval an output interval depends on, on the full grid.
`computed` walks it forwards: what a block cut from the input computes, in full-grid coordinates, and whether
it holds the origin / the end at each op (so it drops and pads as the full decode does there).

Invariant (why a block equals the full computation): an op evaluated on a block that covers the full-grid
dependency of an interval gives the full grid's values on that interval. For `Window` that holds because a
full-grid window lying inside the block is the block's own clamped window too (its start is clamped the same
way only when the block reaches the grid's edge). So a block that covers `needed(ops, n, lo, hi)` computes
outputs [lo, hi] exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Window:
    kernel: int

    def length(self, n: int) -> int:
        return n

    def reads(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        k = min(self.kernel, n)
        start = lambda i: min(max(i - k // 2, 0), n - k)  # noqa: E731 (non-decreasing in i)
        return start(lo), start(hi) + k - 1

    def forward(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return lo, hi


@dataclass(frozen=True)
class Upsample:
    stride: int
    drop: int = 0

    def length(self, n: int) -> int:
        return n * self.stride - self.drop

    def reads(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return (lo + self.drop) // self.stride, (hi + self.drop) // self.stride

    def forward(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        s = self.stride
        return (0 if lo == 0 else lo * s - self.drop), hi * s + s - 1 - self.drop


@dataclass(frozen=True)
class PadEnd:
    count: int

    def length(self, n: int) -> int:
        return n + self.count

    def reads(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return min(lo, n - 1), min(hi, n - 1)

    def forward(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return lo, (hi + self.count if hi == n - 1 else hi)


@dataclass(frozen=True)
class CropEnd:
    count: int

    def length(self, n: int) -> int:
        return n - self.count

    def reads(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return lo, hi

    def forward(self, n: int, lo: int, hi: int) -> tuple[int, int]:
        return min(lo, n - self.count - 1), min(hi, n - self.count - 1)


AxisOp = Union[Window, Upsample, PadEnd, CropEnd]


def lengths(ops: Sequence[AxisOp], n: int) -> list[int]:
    """Grid length at the input of every op, then at the output: len(ops) + 1 entries."""
    out = [int(n)]
    for op in ops:
        out.append(op.length(out[-1]))
        if out[-1] < 1:
            raise ValueError(f"{op} leaves no position of a grid of {out[-2]}")
    return out


def needed(ops: Sequence[AxisOp], n: int, lo: int, hi: int) -> tuple[int, int]:
    """[first, last] input positions (inclusive) that outputs [lo, hi] of `ops` on an input grid of `n` read."""
    sizes = lengths(ops, n)
    if not 0 <= lo <= hi < sizes[-1]:
        raise ValueError(f"outputs [{lo}, {hi}] are not inside a grid of {sizes[-1]}")
    for op, size in zip(reversed(ops), reversed(sizes[:-1])):
        lo, hi = op.reads(size, lo, hi)
    return lo, hi


def computed(ops: Sequence[AxisOp], n: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Full-grid [first, last] positions that a block holding inputs [lo, hi] has at the input of every op,
    then at the output (a block that starts at 0 holds the origin: it drops there; one that ends at n - 1
    holds the end: it pads there)."""
    sizes = lengths(ops, n)
    spans = [(lo, hi)]
    for op, size in zip(ops, sizes[:-1]):
        spans.append(op.forward(size, *spans[-1]))
    return spans


def reach(ops: Sequence[AxisOp], n: int, cell: int, first: int, last: int) -> tuple[int, int]:
    """(before, after): how many input positions before `cell` and after it outputs [first, last] (the ones
    `cell` owns) depend on, on an input grid of `n`."""
    return cell - needed(ops, n, first, first)[0], needed(ops, n, last, last)[1] - cell
