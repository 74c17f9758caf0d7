"""The one tile loop: window-weighted tile results summed into an fp32 accumulator.

The single-process patcher, each multi-GPU rank and the tiled VAE decode all run this loop; what differs
is the function that evaluates a tile and which tiles a rank owns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .plan import Tile, TilePlan

TileCallback = Callable[[int, int, Tile], None]


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
) -> torch.Tensor:
    """Sum of window-weighted results of the tiles owned by `rank`; summed over ranks it is the full blend.

    `evaluate(tile)` returns a tensor shaped (*lead, *tile.shape); the tiled axes are the trailing ones.
    The accumulator is fp32: `out` when given (e.g. a preallocated CPU buffer), else zeros of shape
    (*lead_shape, *plan.shape) on `device`, created at the first tile when `lead_shape` is None. A rank that
    owns no tile returns zeros (it still has to join a reduction). Only one tile's result is alive at a
    time. `before_tile` runs before each tile (interrupt checks), `on_tile(done, total, tile)` after it.
    """
    mine = plan.tiles_for_rank(rank, world)
    if out is not None and out.dtype != torch.float32:
        raise TypeError(f"blend_tiles accumulates in fp32; got an out buffer of {out.dtype}")
    acc = out
    if acc is None and lead_shape is not None:
        acc = torch.zeros((*lead_shape, *plan.shape), dtype=torch.float32, device=device)
    for done, tile in enumerate(mine, start=1):
        if before_tile is not None:
            before_tile(tile)
        result = evaluate(tile)
        if acc is None:
            lead = tuple(result.shape[: result.ndim - len(plan.shape)])
            acc = torch.zeros((*lead, *plan.shape), dtype=torch.float32, device=device or result.device)
        region = (Ellipsis, *tile.slices)
        result = result.to(dtype=torch.float32)
        if any(i.ramp_in or i.ramp_out for i in tile.intervals):  # else the window is all ones: x * 1 == x
            result = result * tile.window(result.device)  # weighted where the result lives (e.g. the GPU)
        acc[region] += result.to(device=acc.device)
        del result
        if on_tile is not None:
            on_tile(done, len(mine), tile)
    if acc is None:
        raise ValueError("blend_tiles: this rank owns no tile; pass lead_shape so it can return zeros")
    return acc
