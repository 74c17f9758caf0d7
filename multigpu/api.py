"""The contracts between a worker group and what it runs, declared in one place.

rank 0 hands the group a `ReplicaSource` (what every worker must hold a copy of) and a job; a worker builds
its copy from the source's `Recipe`, loads the weights rank 0 broadcasts into `Replica.module`, and runs each
job on `Replica.target`. A model call is a `ReduceJob` (its flat partial sum joins one all_reduce); a tiled
decode is a `GatherJob` (each tile goes to rank 0 as soon as it is decoded). Jobs and recipes are plain,
picklable data: no callables travel. What LTX defines for these lives in `ltx/` (model: `ltx.model.job`,
VAE: `ltx.vae.job`, ComfyUI patchers: `ltx.replica`); nothing here knows LTX or ComfyUI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..tiling import Tile
from ..tiling.ranks import BeforeTile


class ReplicaSource(Protocol):
    """What a group replicates on every worker, read on rank 0."""

    module: torch.nn.Module
    """Its state dict names the weights that follow the recipe (they are left out of the recipe's pickle)."""

    def key(self) -> str:
        """Changes whenever the weights computed with change; equal keys mean a worker's copy is current."""

    def recipe(self) -> "Recipe":
        """How a worker builds the empty copy (picklable)."""

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(key, tensor) of the weights as rank 0 computes with them, in `module.state_dict()` order (a layer
        computed from a plain copy may leave out its quantization entries); the same names at every call."""

    def names(self) -> tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]:
        """(key, dtype, shape) of what `weights` yields, in its order, computed without computing the weights
        (a LoRA'd weight is merged once per send, by `weights`)."""


@dataclass(frozen=True)
class Replica:
    """A worker's copy: what its jobs run on (`target`), the module the weights load into, and where those
    weights live between jobs (`home`: the device, or an offload device)."""

    target: Any
    module: torch.nn.Module
    home: torch.device


class Recipe(Protocol):
    def build(self, device: torch.device) -> Replica:
        """The empty replica for a worker computing on `device` (weights on the meta device until loaded)."""


class ReduceJob(Protocol):
    """A job whose ranks' partial sums are summed by one all_reduce (a model call)."""

    numel: int
    """Length of the flat partial sum."""
    dtype: torch.dtype
    """Its dtype, the same on every rank (fp32, or fp64 for sums that do not depend on the order of the ranks)."""

    def run(self, target: Any, rank: int, world: int, before_tile: BeforeTile) -> torch.Tensor:
        """This rank's flat partial sum (`numel` values of `dtype`), computed on `target`."""


class GatherJob(Protocol):
    """A job whose tiles go to rank 0 one by one (a tiled decode); rank 0 blends what it receives itself."""

    tile_lead: tuple[int, ...]
    tile_dtype: torch.dtype
    """What a rank sends for a tile: (*tile_lead, *tile.shape) of tile_dtype."""

    def tiles(self, target: Any, device: torch.device) -> Callable[[Tile], torch.Tensor]:
        """tile -> what rank 0 adds for it, contiguous on `device` (the group's communication device), computed
        on `target`."""
