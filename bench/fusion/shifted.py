"""Shifted tile grids on top of the pack (the peer's `grid_cycle`, measured as a bench method): the model calls
cycle through grids whose boundaries between tiles move by a few cells, at the pack's cost.

Each grid is the pack's split (LTX TDP Tile Config: counts, overlap) with every boundary between neighbouring
tiles moved by the same `shift`: neighbours still overlap by exactly the overlap, so the pack's trapezoid windows
still sum to exactly one, and the tile lengths still sum to the same total (the same tokens per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...ltx.model.call import TDPSettings
from ...ltx.model.facts import geometry_of, ltx_diffusion_model, position_range
from ...ltx.model.patch import WRAPPER_KEY, TDPModelWrapper, apply_tdp
from ...tiling import AxisTiling, Interval, TileCountConfig, TilingError


@dataclass(frozen=True)
class ShiftedAxisTiling:
    """The pack's split of one axis into `tiles` overlapping by `overlap`, every boundary moved by `shift` cells."""

    tiles: int = 1
    overlap: int = 0
    shift: int = 0

    def intervals(self, length: int, axis: str = "axis") -> tuple[Interval, ...]:
        """AxisTiling's intervals with each tile's inner edges moved by `shift`: the first tile ends `shift` later,
        the last starts `shift` later, interior tiles move whole. Ramps are unchanged, so neighbours overlap by
        exactly `overlap` and the windows sum to exactly one. Raises TilingError when a tile would be too short to
        hold its ramps (an end tile up to the overlap, an interior one under twice it)."""
        base = AxisTiling(self.tiles, self.overlap).intervals(length, axis)
        if len(base) == 1:
            return base
        last = len(base) - 1
        out = tuple(Interval(iv.start + (self.shift if i > 0 else 0), iv.end + (self.shift if i < last else 0),
                             iv.ramp_in, iv.ramp_out) for i, iv in enumerate(base))
        for i, iv in enumerate(out):
            if iv.length <= self.overlap or iv.length < iv.ramp_in + iv.ramp_out:
                raise TilingError(f"{axis}: a shift of {self.shift} leaves tile {i} of {self.tiles} on {length} cells "
                                  f"{iv.length} cells long, too short for an overlap of {self.overlap}")
        return out


def grid_shifts(cycle: int, overlap: int) -> tuple[int, ...]:
    """The shifts of a cycle of `cycle` grids: evenly spread over one overlap, centred on the pack's grid,
    round(overlap * (j / (cycle - 1) - 1/2)) for j = 0 .. cycle - 1 (overlap 5: -2, 2; -2, 0, 2); (0,) for 1."""
    if cycle <= 1:
        return (0,)
    return tuple(round(overlap * (j / (cycle - 1) - 0.5)) for j in range(cycle))


def shifted_tiling(tiles: tuple[int, int], overlap: int, shift: int) -> TileCountConfig:
    """The pack's (height, width) tiling with both axes' boundaries moved by `shift` (no overlap on an untiled axis)."""
    axis = lambda n: ShiftedAxisTiling(n, overlap if n > 1 else 0, shift if n > 1 else 0)  # noqa: E731
    return TileCountConfig(height=axis(tiles[0]), width=axis(tiles[1]))


class ShiftedGridWrapper:
    """The APPLY_MODEL wrapper: the pack's own wrapper with the grid of this call's step (grids[step % cycle]); the
    step is the index of the call's sigma in the sampler's sigmas (one model call per step for the samplers here)."""

    def __init__(self, grids: tuple[TDPModelWrapper, ...]):
        self.grids = grids

    def __call__(self, executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
        grid = self.grids[step_of(t, transformer_options["sample_sigmas"]) % len(self.grids)]
        return grid(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs)


def shifted_tdp(model: Any, tiles: tuple[int, int], overlap: int, cycle: int) -> Any:
    """The pack's patched MODEL (apply_tdp) whose model calls cycle through `cycle` shifted grids."""
    import comfy.patcher_extension as ext

    m = apply_tdp(model, shifted_tiling(tiles, overlap, 0))
    geometry = geometry_of(ltx_diffusion_model(m))
    grids = tuple(TDPModelWrapper(TDPSettings(shifted_tiling(tiles, overlap, s)), geometry, positions=position_range(m))
                  for s in grid_shifts(cycle, overlap))
    m.remove_wrappers_with_key(ext.WrappersMP.APPLY_MODEL, WRAPPER_KEY)
    m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, WRAPPER_KEY, ShiftedGridWrapper(grids))
    return m


def step_of(sigma: torch.Tensor, sigmas: torch.Tensor) -> int:
    """The index of `sigma` in `sigmas` (the nearest one)."""
    return int((sigmas.to(sigma.device) - sigma.flatten()[0]).abs().argmin())
