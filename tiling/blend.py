"""The one tile loop: window-weighted tile results summed into an fp32 or fp64 accumulator.

The single-process patcher, each multi-GPU rank and the tiled VAE decode all run this loop; what differs
is the function that evaluates a tile and which tiles a rank owns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .plan import Tile, TilePlan

TileCallback = Callable[[int, int, Tile], None]
SUM_DTYPES = (torch.float32, torch.float64)


def exact_sum_dtype(device: torch.device | str | None) -> torch.dtype:
    """The accumulator dtype in which sums of window-weighted fp32 tile results do not depend on the order
    of the terms: float64 (a product of two fp32 values is exact in it, and so is a sum of a few such
    products of similar size), so one process and any split of the tiles over ranks, summed by an
    all_reduce in any order, give the same bits. float32 on MPS, which has no float64."""
    return torch.float32 if torch.device(device or "cpu").type == "mps" else torch.float64


def blend_tiles(
    plan: TilePlan,
    evaluate: Callable[[Tile], torch.Tensor],
    *,
    rank: int = 0,
    world: int = 1,
    out: torch.Tensor | None = None,
    lead_shape: tuple[int, ...] | None = None,
    device: torch.device | str | None = None,
    on_tile: TileCallback | None = None,
    before_tile: Callable[[Tile], None] | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sum of window-weighted results of the tiles owned by `rank`; summed over ranks it is the full blend.

    `evaluate(tile)` returns a tensor shaped (*lead, *tile.shape); the tiled axes are the trailing ones.
    The accumulator is fp32 or fp64 (`exact_sum_dtype`): `out` when given (e.g. a preallocated CPU buffer),
    else zeros of `dtype` and shape (*lead_shape, *plan.shape) on `device`, created at the first tile when
    `lead_shape` is None. Results and windows are multiplied in the accumulator's dtype. A rank that
    owns no tile returns zeros (it still has to join a reduction). Only one tile's result is alive at a
    time. `before_tile` runs before each tile (interrupt checks), `on_tile(done, total, tile)` after it.
    """
    mine = plan.tiles_for_rank(rank, world)
    if (out.dtype if out is not None else dtype) not in SUM_DTYPES:
        raise TypeError(f"blend_tiles accumulates in fp32 or fp64; got {out.dtype if out is not None else dtype}")
    acc = out
    if acc is None and lead_shape is not None:
        acc = torch.zeros((*lead_shape, *plan.shape), dtype=dtype, device=device)
    for done, tile in enumerate(mine, start=1):
        if before_tile is not None:
            before_tile(tile)
        result = evaluate(tile)
        if acc is None:
            lead = tuple(result.shape[: result.ndim - len(plan.shape)])
            acc = torch.zeros((*lead, *plan.shape), dtype=dtype, device=device or result.device)
        add_tile(acc, tile, result)
        del result
        if on_tile is not None:
            on_tile(done, len(mine), tile)
    if acc is None:
        raise ValueError("blend_tiles: this rank owns no tile; pass lead_shape so it can return zeros")
    return acc


def add_tile(acc: torch.Tensor, tile: Tile, result: torch.Tensor) -> None:
    """`acc[tile's region] += result * tile's window`, in the accumulator's dtype, weighted where `result` lives.

    The window is applied only where one of the tile's intervals ramps (else it is all ones and x * 1 == x: no
    window is built). The one step by which any tile's result enters a blend (`blend_tiles`, and a tile another
    rank sent)."""
    result = result.to(dtype=acc.dtype)
    if any(i.ramp_in or i.ramp_out for i in tile.intervals):
        result = result * tile.window(result.device).to(acc.dtype)
    acc[(Ellipsis, *tile.slices)] += result.to(device=acc.device)
