"""Tile plans: enumeration order, round-robin ownership, and the balanced split of GPUs into tiles."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import VIDEO_AXES, AxisTileSize, AxisTiling, TilingError, balanced_split, owner_of, plan_tiles


def plan_2x3x4():
    return plan_tiles((9, 12, 16), [AxisTiling(2, 1), AxisTiling(3, 2), AxisTiling(4, 1)], VIDEO_AXES)


def test_tiles_are_enumerated_frames_slowest_and_width_fastest():
    plan = plan_2x3x4()
    n_f, n_h, n_w = plan.counts
    starts = [[iv.start for iv in axis] for axis in plan.axis_intervals]
    assert plan.counts == (2, 3, 4) and len(plan) == 24, f"plan counts {plan.counts}, {len(plan)} tiles"
    for tile in plan.tiles:
        f, h, w = (axis.index(start) for axis, start in zip(starts, tile.origin))
        expected = (f * n_h + h) * n_w + w
        assert tile.index == expected, f"tile at origin {tile.origin} has index {tile.index}, expected {expected}"
    assert [t.index for t in plan.tiles] == list(range(24)), "tiles must come in index order"


def test_a_tiles_shape_and_slices_follow_its_intervals():
    tile = plan_2x3x4().tiles[5]  # f=0, h=1, w=1
    assert tile.slices == tuple(iv.slice for iv in tile.intervals), f"slices were {tile.slices}"
    assert tile.shape == tuple(iv.length for iv in tile.intervals), f"shape was {tile.shape}"
    assert tile.window().shape == tile.shape, f"window shape was {tuple(tile.window().shape)}"


def test_tiles_go_to_ranks_round_robin():
    got = [owner_of(i, 3) for i in range(8)]
    assert got == [0, 1, 2, 0, 1, 2, 0, 1], f"owners of tiles 0..7 over 3 ranks were {got}"


def test_a_world_of_no_ranks_is_an_error():
    with pytest.raises(ValueError, match="at least 1"):
        owner_of(0, 0)


def test_with_three_ranks_and_two_tiles_the_third_rank_gets_none():
    plan = plan_tiles((1, 8, 16), [AxisTiling(), AxisTiling(), AxisTiling(2, 2)], VIDEO_AXES)
    shares = [[t.index for t in plan.tiles_for_rank(rank, 3)] for rank in range(3)]
    assert shares == [[0], [1], []], f"tiles per rank were {shares}"


@settings(max_examples=60, deadline=None)
@given(st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)), st.integers(1, 9))
def test_the_ranks_shares_are_disjoint_and_cover_every_tile(counts, world):
    plan = plan_tiles((8, 16, 16), [AxisTiling(n, 1) for n in counts], VIDEO_AXES)
    shares = [{t.index for t in plan.tiles_for_rank(rank, world)} for rank in range(world)]
    union = set().union(*shares)
    assert union == set(range(len(plan))), f"{world} ranks cover {sorted(union)} of {len(plan)} tiles"
    assert sum(len(s) for s in shares) == len(plan), f"{world} ranks: some tile is owned twice: {shares}"


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [(1, (1, 1)), (2, (1, 2)), (4, (2, 2)), (6, (2, 3)), (8, (2, 4)), (12, (3, 4)), (7, (1, 7))],
)
def test_balanced_split_without_a_size_follows_upstream(ranks, expected):
    got = balanced_split(ranks)
    assert got == expected, f"{ranks} ranks split into {got}, upstream gives {expected}"


@given(st.integers(1, 64), st.one_of(st.none(), st.integers(1, 200)), st.one_of(st.none(), st.integers(1, 200)))
@settings(max_examples=300, deadline=None)
def test_balanced_split_always_uses_every_rank(ranks, height, width):
    h, w = balanced_split(ranks, height, width)
    assert h * w == ranks, f"{ranks} ranks on ({height}, {width}) split into {h} x {w} = {h * w} tiles"


def test_balanced_split_gives_a_landscape_latent_more_width_tiles():
    got = balanced_split(2, 34, 60)
    assert got == (1, 2), f"2 ranks on a 34 x 60 latent split into {got}"


def test_balanced_split_gives_a_portrait_latent_more_height_tiles():
    got = balanced_split(2, 60, 34)
    assert got == (2, 1), f"2 ranks on a 60 x 34 latent split into {got} (upstream would give (1, 2))"


def test_balanced_split_refuses_zero_ranks():
    with pytest.raises(ValueError):
        balanced_split(0)


def test_a_2d_layout_that_upstream_would_brighten_by_35_percent_is_refused():
    """Upstream blends 4 x 4 tiles with overlap 8 on 21 x 21 latents without a check: the weights compound to 1.35."""
    with pytest.raises(TilingError) as refused:
        plan_tiles((1, 21, 21), [AxisTiling(), AxisTiling(4, 8), AxisTiling(4, 8)], VIDEO_AXES)
    message = str(refused.value)
    assert "height" in message and "is 4" in message, f"refusal was {message!r}"


def test_a_plan_needs_one_spec_per_axis():
    with pytest.raises(TilingError, match="3 axes"):
        plan_tiles((8, 8), [AxisTiling(), AxisTiling(), AxisTiling()], VIDEO_AXES)


def test_size_and_count_specs_mix_in_one_plan():
    plan = plan_tiles((9, 40, 30), [AxisTiling(1, 0), AxisTileSize(16, 4), AxisTiling(2, 3)], VIDEO_AXES)
    assert plan.counts == (1, math.ceil((40 - 4) / (16 - 4)), 2), f"plan counts were {plan.counts}"
