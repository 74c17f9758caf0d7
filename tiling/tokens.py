"""Which conditioning (guide) tokens a tile keeps, and the blend weight of each kept token."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def conditioning_keep_mask(token_bounds: torch.Tensor, tile_bounds: Sequence[tuple[float, float]]) -> torch.Tensor:
    """Bool mask over N conditioning tokens: kept when the token's [start, end) overlaps the tile's
    [start, end) on every axis, or when its time start is negative (a reference token: every tile keeps it).

    `token_bounds` is (N, A, 2) with axis 0 = time; `tile_bounds` holds A (start, end) pairs in the same
    units (e.g. pixels) as the tokens.
    """
    if token_bounds.ndim != 3 or token_bounds.shape[-1] != 2:
        raise ValueError(f"token_bounds must be (N, axes, 2), got {tuple(token_bounds.shape)}")
    if token_bounds.shape[1] != len(tile_bounds):
        raise ValueError(f"{token_bounds.shape[1]} token axes but {len(tile_bounds)} tile axes")
    keep = torch.ones(token_bounds.shape[0], dtype=torch.bool, device=token_bounds.device)
    for axis, (lo, hi) in enumerate(tile_bounds):
        keep &= (token_bounds[:, axis, 0] < hi) & (token_bounds[:, axis, 1] > lo)
    return keep | (token_bounds[:, 0, 0] < 0)


def conditioning_weights(keep_masks: torch.Tensor) -> torch.Tensor:
    """fp32 (tiles, N) blend weights: 1 / (number of tiles keeping the token) where kept, else 0.

    Each token kept by at least one tile has weights summing to one over the tiles.
    """
    keep = keep_masks.to(torch.float32)
    count = keep.sum(dim=0, keepdim=True).clamp(min=1.0)
    return keep / count
