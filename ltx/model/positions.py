"""Per-tile RoPE positions for LTX, through an object patch of the model's patchifier on a clone.

LTX computes token positions from the latent grid that its patchifier reports, then maps them to pixels
(x (8, 32, 32), with an optional causal fix on time). A tile cut out of the latent therefore starts at 0
on every axis, which is exactly the normalised position for spatial tiles and for tiles that start at
frame 0. Two cases need other positions, and both are a shift of the reported latent grid:

* positions not normalised: the tile keeps its global grid (shift by the tile's origin);
* a temporal tile with the causal fix: normalised global positions are 0, 8, 16, ... pixels, while a
  fresh grid would give 0, 1, 9, ... (its first frame would pass as the causal first frame). A shift of
  (scale - 1) / scale latent frames makes the model's own mapping land on 0, 8, 16, ...

The shift for the call in flight lives in thread-local state, set around each tile call: each of ComfyUI's
MultiGPU device threads sees its own tile's, and torch.compile (Dynamo) traces the read without a graph break (it
cannot trace `ContextVar.get`; measured on torch 2.9: 12 breaks and an eager fallback for 2 x 2 tiles). The shift
is kept as a tensor, so Dynamo takes it as a graph input, not a constant: tiles whose shifts differ share a graph.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

from ...tiling import AxisScale

_local = threading.local()
"""`shift`: the (3,) float32 grid shift of the tile call in flight in this thread, or None (`shifted_grid`)."""


def grid_shift(origin: Sequence[int], normalize: bool, time: AxisScale) -> tuple[float, float, float] | None:
    """Latent-grid shift that gives a tile with global `origin` (frames, h, w) its intended positions, on a
    model whose time axis maps to pixels as `time` does.

    None means the model's own positions for the cut-out tile are already right (always the case for a
    tile at the origin, so 1 x 1 tiling leaves the model untouched).
    """
    f0, h0, w0 = (int(v) for v in origin)
    if not normalize:
        shift = (float(f0), float(h0), float(w0))
    elif time.causal and f0 > 0:
        shift = ((time.factor - 1) / time.factor, 0.0, 0.0)
    else:
        shift = (0.0, 0.0, 0.0)
    return None if shift == (0.0, 0.0, 0.0) else shift


@contextlib.contextmanager
def shifted_grid(shift: tuple[float, float, float] | None) -> Iterator[None]:
    """Within the block, the patched patchifier reports its latent grid moved by `shift` (in this thread only);
    after it, by what it was before."""
    before = getattr(_local, "shift", None)
    _local.shift = None if shift is None else torch.tensor(shift, dtype=torch.float32)
    try:
        yield
    finally:
        _local.shift = before


class ShiftedGridPatchifier:
    """Stands in for an LTX model's `patchifier` (object patch on a clone) and delegates everything to it;
    `patchify` moves the reported latent grid by the shift of the tile call in flight, if any."""

    def __init__(self, inner: object):
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def patchify(self, latents: torch.Tensor, *args, **kwargs):
        tokens, coords = self._inner.patchify(latents, *args, **kwargs)
        shift = getattr(_local, "shift", None)
        if shift is None or coords is None:
            return tokens, coords
        delta = shift.to(coords.device).view(1, 3, *([1] * (coords.ndim - 2)))
        return tokens, coords.to(torch.float32) + delta
