"""An independent reference for tests/tiling's split tests: upstream LTX-2's split arithmetic, unchecked, and the
pack's window sum beside it.

The upstream functions are written from upstream LTX-2's split formula (`ltx_core/tiling.py`:
total = dim + ov*(n-1), s = total // n, tile i = [i*(s-ov) + min(i, total % n), +s (+1 while i < total % n))),
independently of the pack: they are what upstream computes without any check, so the tests can show that a refused
layout really would have brightened (or broken) the seams, and an accepted one really is upstream's split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ltx_tdp.tiling import Interval

TOL = 1e-6
"""How far from one a blend's weight sum may be."""


def upstream_spans(length: int, tiles: int, overlap: int) -> list[tuple[int, int]]:
    """Upstream's raw [start, end) per tile: total = L + ov(n-1), s = total // n, r = total % n."""
    total = length + overlap * (tiles - 1)
    s, r = divmod(total, tiles)
    spans = []
    for i in range(tiles):
        start = i * (s - overlap) + min(i, r)
        spans.append((start, start + s + (1 if i < r else 0)))
    return spans


def upstream_stride(length: int, tiles: int, overlap: int) -> int:
    """s - ov: how far each tile starts after the previous one (before the remainder); <= 0 is degenerate."""
    return (length + overlap * (tiles - 1)) // tiles - overlap


def upstream_weight_sum(length: int, tiles: int, overlap: int) -> list[float]:
    """Upstream's unnormalised blend weight per cell: ramps k/(ov+1) on inner ends, multiplied, summed."""
    acc = [0.0] * length
    ramp = [(k + 1) / (overlap + 1) for k in range(overlap)]
    for i, (start, end) in enumerate(upstream_spans(length, tiles, overlap)):
        w = [1.0] * (end - start)
        if i > 0:
            for k in range(overlap):
                w[k] *= ramp[k]
        if i < tiles - 1:
            for k in range(overlap):
                w[end - start - 1 - k] *= ramp[k]
        for cell in range(start, end):
            acc[cell] += w[cell - start]
    return acc


def pack_weight_sum(intervals: tuple[Interval, ...], length: int) -> torch.Tensor:
    """What the pack blends with: the fp32 windows of `intervals` summed over [0, length)."""
    from ltx_tdp.tiling import window_1d

    acc = torch.zeros(length, dtype=torch.float32)
    for interval in intervals:
        acc[interval.slice] += window_1d(interval)
    return acc


def spans_of(intervals: tuple[Interval, ...]) -> list[tuple[int, int]]:
    """The intervals as (start, end) pairs."""
    return [(i.start, i.end) for i in intervals]
