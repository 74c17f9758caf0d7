"""Shifted tile grids (bench/fusion/shifted.py): the arithmetic that keeps the pack's blend exact at every shift."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp.bench.fusion.config import FusionConfig
from ltx_tdp.bench.fusion.shifted import ShiftedAxisTiling, ShiftedGridWrapper, grid_shifts, shifted_tiling
from ltx_tdp.tiling import VIDEO_AXES, TilingError, max_valid_overlap, plan_tiles


def test_every_accepted_shift_keeps_the_windows_summing_to_one_and_the_tokens_equal():
    """Every length 2..40, 2..4 tiles, every overlap the pack accepts and every shift: an accepted shifted split
    covers the axis, neighbours overlap by exactly the overlap, the windows sum to one within 1e-6 and the tiles hold
    as many cells as the unshifted split's; a refused one really has a tile too short for its ramps."""
    accepted = refused = 0
    for length in range(2, 41):
        for tiles in range(2, 5):
            for overlap in range(0, max_valid_overlap(length, tiles) + 1):
                for shift in range(-length, length + 1):
                    spec = ShiftedAxisTiling(tiles, overlap, shift)
                    try:
                        iv = spec.intervals(length)
                    except TilingError:
                        refused += 1
                        base = ShiftedAxisTiling(tiles, overlap, 0).intervals(length)
                        lengths = [b.length + (shift if i == 0 else -shift if i == tiles - 1 else 0)
                                   for i, b in enumerate(base)]
                        assert min(lengths) <= overlap or any(n < 2 * overlap for n in lengths[1:-1]), (length, tiles, overlap, shift)
                        continue
                    accepted += 1
                    where = (length, tiles, overlap, shift)
                    assert iv[0].start == 0 and iv[-1].end == length, where
                    assert all(a.end - b.start == overlap for a, b in zip(iv, iv[1:])), where
                    assert sum(i.length for i in iv) == length + (tiles - 1) * overlap, where
                    total = plan_tiles((length,), (spec,), ("axis",)).weight_sum()
                    err = float((total - 1).abs().max())
                    assert err <= 1e-6, f"{where}: windows sum to one within {err:.2e}"
    assert accepted > 10_000 and refused > 0, f"{accepted} accepted, {refused} refused"


@pytest.mark.parametrize("cells", [32, 16])
@pytest.mark.parametrize("cycle", [2, 3, 4])
def test_the_benchmark_s_grids_blend_exactly_in_2d_at_the_same_cost(cells, cycle):
    cfg = FusionConfig()
    base = plan_tiles((2, cells, cells), shifted_tiling(cfg.tiles, cfg.overlap, 0).axes, VIDEO_AXES)
    for shift in grid_shifts(cycle, cfg.overlap):
        plan = plan_tiles((2, cells, cells), shifted_tiling(cfg.tiles, cfg.overlap, shift).axes, VIDEO_AXES)
        err = float((plan.weight_sum() - 1).abs().max())
        assert err <= 1e-6, f"{cells} cells, shift {shift}: windows sum to one within {err:.2e}"
        tokens = sum(t.shape[0] * t.shape[1] * t.shape[2] for t in plan.tiles)
        expected = sum(t.shape[0] * t.shape[1] * t.shape[2] for t in base.tiles)
        assert tokens == expected and len(plan.tiles) == 4, f"shift {shift}: {tokens} tokens, unshifted {expected}"


def test_grid_shifts_are_spread_over_one_overlap_around_the_pack_s_grid():
    assert grid_shifts(1, 5) == (0,)
    assert grid_shifts(2, 5) == (-2, 2), grid_shifts(2, 5)
    assert grid_shifts(3, 5) == (-2, 0, 2), grid_shifts(3, 5)
    assert grid_shifts(4, 5) == (-2, -1, 1, 2), grid_shifts(4, 5)


def test_a_shift_moves_the_boundary_between_tiles_and_nothing_else():
    plain = ShiftedAxisTiling(2, 5, 0).intervals(32)
    moved = ShiftedAxisTiling(2, 5, -2).intervals(32)
    assert [(i.start, i.end) for i in plain] == [(0, 19), (14, 32)], plain
    assert [(i.start, i.end) for i in moved] == [(0, 17), (12, 32)], moved
    assert [(i.ramp_in, i.ramp_out) for i in moved] == [(0, 5), (5, 0)], moved


def test_a_shift_that_leaves_a_tile_too_short_is_refused():
    with pytest.raises(TilingError, match="too short"):
        ShiftedAxisTiling(2, 5, -14).intervals(32)  # the first tile would be [0, 5): all ramp
    shortest = ShiftedAxisTiling(2, 5, -13).intervals(32)
    assert (shortest[0].start, shortest[0].end) == (0, 6), shortest


def test_each_model_call_takes_the_grid_of_its_step():
    """The wrapper's choice alone, with stand-ins for the pack's per-grid wrappers that record which one ran
    (the real ones run in the smoke test through ComfyUI)."""
    seen = []
    grids = tuple((lambda k: lambda executor, x, t, *args, **kwargs: seen.append(k))(k) for k in range(2))
    sigmas = torch.tensor([0.85, 0.725, 0.4219, 0.0])
    for sigma in sigmas[:-1]:
        ShiftedGridWrapper(grids)(None, None, sigma.reshape(1), None, None, None, {"sample_sigmas": sigmas})
    assert seen == [0, 1, 0], seen
