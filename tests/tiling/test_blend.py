"""The one tile loop: window-weighted tile results summed in fp32, split round-robin over ranks."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp.tiling import VIDEO_AXES, AxisTiling, blend_tiles, plan_tiles

LEAD = (2, 3)  # (batch, channels) in front of the tiled axes


def plan_2x2():
    return plan_tiles((12, 16), [AxisTiling(2, 3), AxisTiling(2, 4)], ("height", "width"))


def plan_2x2x2():
    return plan_tiles((7, 10, 12), [AxisTiling(2, 2), AxisTiling(2, 3), AxisTiling(2, 2)], VIDEO_AXES)


def plan_with_three_per_axis():
    return plan_tiles((9, 14, 17), [AxisTiling(3, 2), AxisTiling(3, 3), AxisTiling(3, 2)], VIDEO_AXES)


def identity(x: torch.Tensor):
    """An `evaluate` that returns the input's own tile: blending it must give the input back."""
    return lambda tile: x[(Ellipsis, *tile.slices)]


@pytest.mark.parametrize("make_plan", [plan_2x2, plan_2x2x2, plan_with_three_per_axis])
def test_blending_each_tiles_own_input_gives_the_input_back(make_plan):
    plan = make_plan()
    x = torch.randn(*LEAD, *plan.shape, generator=torch.Generator().manual_seed(0))
    got = blend_tiles(plan, identity(x))
    assert got.shape == x.shape, f"blend shape {tuple(got.shape)}, input {tuple(x.shape)}"
    error = (got - x).abs().max().item()
    assert error <= 1e-6, f"{plan.counts} tiles: blend differs from the input by {error:.2e}"


@pytest.mark.parametrize("make_plan", [plan_2x2, plan_2x2x2])
def test_blending_ones_gives_exactly_the_weight_sum(make_plan):
    plan = make_plan()
    got = blend_tiles(plan, lambda tile: torch.ones(*LEAD, *tile.shape))
    want = plan.weight_sum().expand(*LEAD, *plan.shape)
    assert torch.equal(got, want), f"off by {(got - want).abs().max().item():.2e} from plan.weight_sum()"


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("make_plan", [plan_2x2x2, plan_with_three_per_axis])
def test_the_ranks_partial_blends_sum_to_the_single_process_blend(make_plan, world):
    """Not bit-identical: the ranks' partial sums add the tiles in a different order (fp32 rounding)."""
    plan = make_plan()
    x = torch.randn(*LEAD, *plan.shape, generator=torch.Generator().manual_seed(1))
    whole = blend_tiles(plan, identity(x))
    parts = [blend_tiles(plan, identity(x), rank=r, world=world, lead_shape=LEAD) for r in range(world)]
    error = (torch.stack(parts).sum(0) - whole).abs().max().item()
    assert error <= 1e-6, f"{world} ranks: sum of partial blends differs from the whole by {error:.2e}"


def test_a_rank_without_tiles_returns_zeros_for_the_reduction():
    plan = plan_tiles((4, 8), [AxisTiling(), AxisTiling(2, 2)], ("height", "width"))
    calls = []
    got = blend_tiles(plan, lambda tile: calls.append(tile), rank=2, world=3, lead_shape=(1, 4))
    assert calls == [], f"rank 2 of 3 evaluated {len(calls)} tiles of a 2-tile plan"
    assert got.shape == (1, 4, 4, 8) and got.dtype == torch.float32, f"got {tuple(got.shape)} {got.dtype}"
    assert torch.count_nonzero(got) == 0, "a rank without tiles must contribute zeros"


def test_a_rank_without_tiles_and_without_lead_shape_is_told_to_pass_one():
    plan = plan_tiles((4, 8), [AxisTiling(), AxisTiling(2, 2)], ("height", "width"))
    with pytest.raises(ValueError, match="lead_shape"):
        blend_tiles(plan, lambda tile: None, rank=2, world=3)


def test_callbacks_run_once_per_owned_tile_in_order():
    plan = plan_2x2x2()
    events = []

    def evaluate(tile):
        events.append(("evaluate", tile.index))
        return torch.zeros(*tile.shape)

    blend_tiles(
        plan,
        evaluate,
        rank=1,
        world=2,
        before_tile=lambda tile: events.append(("before", tile.index)),
        on_tile=lambda done, total, tile: events.append(("after", tile.index, done, total)),
    )
    want = []
    for done, index in enumerate([1, 3, 5, 7], start=1):
        want += [("before", index), ("evaluate", index), ("after", index, done, 4)]
    assert events == want, f"events were {events}"


def test_bf16_tile_results_are_accumulated_in_fp32():
    """Upstream accumulates in bf16 (weights off by up to 2e-3); fp32 keeps the blend of bf16 tiles exact."""
    plan = plan_2x2x2()
    x = torch.randn(*LEAD, *plan.shape, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    got = blend_tiles(plan, identity(x))
    assert got.dtype == torch.float32, f"accumulator dtype is {got.dtype}"
    error = (got - x.float()).abs().max().item()
    assert error <= 1e-6, f"blend of bf16 tiles differs from the bf16 input by {error:.2e}"


def test_a_preallocated_out_buffer_is_the_accumulator():
    plan = plan_2x2()
    x = torch.randn(*LEAD, *plan.shape, generator=torch.Generator().manual_seed(3))
    out = torch.zeros(*LEAD, *plan.shape, dtype=torch.float32)
    got = blend_tiles(plan, identity(x), out=out)
    assert got is out and got.data_ptr() == out.data_ptr(), "blend_tiles did not return the `out` buffer"
    error = (out - x).abs().max().item()
    assert error <= 1e-6, f"the blend in `out` differs from the input by {error:.2e}"


def _rank_sums(plan, evaluate, world: int, dtype: torch.dtype) -> torch.Tensor:
    """The ranks' partial blends summed as an all_reduce would: rank by rank, in `dtype`."""
    total = blend_tiles(plan, evaluate, rank=0, world=world, lead_shape=LEAD, dtype=dtype)
    for rank in range(1, world):
        total = total + blend_tiles(plan, evaluate, rank=rank, world=world, lead_shape=LEAD, dtype=dtype)
    return total


@pytest.mark.parametrize("make_plan", [plan_2x2, plan_2x2x2, plan_with_three_per_axis])
def test_float64_sums_are_bit_for_bit_the_same_for_every_split_over_ranks(make_plan):
    """In float64 the weighted fp32 tile results sum to the same bits in any order; in fp32 they do not
    (the control), which is what a 2-rank all_reduce against one process would show."""
    from ltx_tdp.tiling import exact_sum_dtype

    plan = make_plan()
    gen = torch.Generator().manual_seed(4)
    results = {t.index: torch.randn(*LEAD, *t.shape, generator=gen) for t in plan.tiles}
    evaluate = lambda tile: results[tile.index]  # noqa: E731  (a model whose tile results are fixed numbers)
    assert exact_sum_dtype("cpu") == torch.float64 and exact_sum_dtype("mps") == torch.float32
    alone = blend_tiles(plan, evaluate, lead_shape=LEAD, dtype=torch.float64)
    for world in (2, 3):
        split = _rank_sums(plan, evaluate, world, torch.float64)
        assert torch.equal(split.to(torch.float32), alone.to(torch.float32)), \
            f"{plan.counts}, {world} ranks: float64 sums differ by {(split - alone).abs().max().item():.3e}"
    fp32_alone = blend_tiles(plan, evaluate, lead_shape=LEAD)
    fp32_differs = [w for w in (2, 3) if not torch.equal(_rank_sums(plan, evaluate, w, torch.float32), fp32_alone)]
    assert fp32_differs, f"{plan.counts}: the fp32 control summed to the same bits for every split (no test)"
