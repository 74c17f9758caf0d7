"""Trapezoid blend windows, 1-D and separable N-D, always fp32."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from .intervals import Interval


def window_1d(interval: Interval, device: torch.device | str | None = None) -> torch.Tensor:
    """fp32 weights over `interval`: ramp k/(r+1), k = 1..r, at each end that has a ramp, 1 elsewhere.

    Two ramps of the same length over the same cells sum to exactly one cell by cell.
    """
    w = torch.ones(interval.length, dtype=torch.float32, device=device)
    if interval.ramp_in:
        r = interval.ramp_in
        w[:r] *= torch.arange(1, r + 1, dtype=torch.float32, device=device) / (r + 1)
    if interval.ramp_out:
        r = interval.ramp_out
        w[interval.length - r :] *= torch.arange(r, 0, -1, dtype=torch.float32, device=device) / (r + 1)
    return w


def window_nd(intervals: Sequence[Interval], device: torch.device | str | None = None) -> torch.Tensor:
    """Outer product of the 1-D windows: the separable mask of one tile, shape = the tile's shape.

    The 1-D windows are cached per (interval, device), so every model call of a sampling run reuses them;
    the N-D product is built per call and never cached (a pixel tile of a 4K decode is hundreds of MiB).
    """
    key = str(torch.device(device)) if device is not None else "cpu"
    out = torch.ones((), dtype=torch.float32, device=device)
    for interval in intervals:
        out = out.unsqueeze(-1) * _window_1d_cached(interval, key)
    return out


@functools.lru_cache(maxsize=1024)
def _window_1d_cached(interval: Interval, device: str) -> torch.Tensor:
    return window_1d(interval, device)
