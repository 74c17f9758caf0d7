"""The ranks that share a tile loop's tiles: the one interface between a tile loop and multi-GPU.

A tile loop hands its ranks `partial(rank, world, before_tile)`: the window-weighted sum of the tiles that
`rank` of `world` ranks owns (round-robin, `TilePlan.tiles_for_rank`), running `before_tile(tile)`, when
given, before each tile. What the other ranks run is described by `job`; `ONE_RANK`, this process alone,
needs none. Two ways to combine the ranks' sums:

* `reduce`: the sum over every rank, on every rank (one all_reduce): model calls.
* `gather`: every rank's tiles of `plan` end up in this rank's output: `partial` blends this rank's own, and
  `add(tile, result)` each tile another rank sends (tile by tile, so none of them holds more than a tile; the
  result is whatever the job's ranks send for a tile, e.g. a VAE's raw pixels): VAE decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Protocol

import torch

from .plan import Tile, TilePlan

BeforeTile = Optional[Callable[[Tile], None]]
Partial = Callable[[int, int, BeforeTile], torch.Tensor]
"""partial(rank, world, before_tile) -> this rank's window-weighted sum (an fp32 tensor)."""
AddTile = Callable[[Tile, torch.Tensor], None]
"""add(tile, result): blend what another rank sent for `tile` into this rank's output."""


class TileRanks(Protocol):
    """The ranks that run a tile loop's tiles (this process is rank 0)."""

    def reduce(self, job: Any, partial: Partial) -> torch.Tensor:
        """The sum over every rank of `partial(rank, world, before_tile)`."""

    def gather(self, job: Any, partial: Partial, plan: TilePlan, add: AddTile) -> None:
        """Every rank's tiles of `plan` blended into this rank's output: its own by `partial`, the others' by
        `add`, in tile order."""


class OneRank:
    """This process alone: rank 0 of 1 owns every tile, so its partial sum is already the blend."""

    def reduce(self, job: Any, partial: Partial) -> torch.Tensor:
        return partial(0, 1, None)

    def gather(self, job: Any, partial: Partial, plan: TilePlan, add: AddTile) -> None:
        partial(0, 1, None)


ONE_RANK = OneRank()
