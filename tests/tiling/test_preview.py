"""The tile preview draws the plan the patcher blends with: exact blends show one flat colour."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import (LTX_GEOMETRY, VIDEO_AXES, AxisTiling, Interval, TileCountConfig, TilePlan, TilingError,
                            max_valid_overlap, plan_tiles)
from ltx_tdp.tiling.preview import EXACT_COLOUR, EXACT_TOLERANCE, heat_colours, preview_tiles, render_plan


def _heat_panel(preview) -> torch.Tensor:
    """The weight-sum panel: right of the layout panel, same size."""
    _, n_h, n_w = preview.plan.shape
    margin = 8
    cell = (preview.image.shape[1] - 3 * margin) // (2 * n_w)
    top, left = margin, 2 * margin + n_w * cell
    return preview.image[top: top + n_h * cell, left: left + n_w * cell]


@st.composite
def valid_layouts(draw):
    shape = (draw(st.integers(1, 12)), draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    axes = []
    for n in shape:
        tiles = draw(st.integers(1, min(n, 5)))
        best = max_valid_overlap(n, tiles)
        if best < 0:
            tiles, best = 1, 0
        axes.append(AxisTiling(tiles, draw(st.integers(0, best))))
    return shape, TileCountConfig(*axes)


@settings(max_examples=60, deadline=None)
@given(valid_layouts())
def test_weight_sum_of_a_valid_layout_is_one_everywhere_and_the_heat_map_is_flat(layout):
    shape, tiling = layout
    preview = preview_tiles(shape, tiling)
    assert preview.weight_sum.shape == shape
    assert preview.max_deviation <= EXACT_TOLERANCE, f"weight sum off by {preview.max_deviation:.3e} for {tiling}"
    heat = _heat_panel(preview)
    assert heat.numel() > 0
    assert torch.equal(heat, torch.tensor(EXACT_COLOUR).expand_as(heat)), "heat map is not one flat 'exact' colour"
    assert "sum to exactly 1" in preview.summary


def test_the_4k_stage2_layout_sums_to_one_within_1e_6():
    shape = LTX_GEOMETRY.latent_shape(121, 2176, 3840)
    assert shape == (16, 68, 120)
    preview = preview_tiles(shape, TileCountConfig(AxisTiling(1, 0), AxisTiling(2, 5), AxisTiling(2, 5)))
    assert (preview.weight_sum - 1).abs().max() <= 1e-6, preview.max_deviation
    assert "largest tile: 16 x 37 x 63 latent = 121 frames at 2016 x 1184 px" in preview.summary, preview.summary
    image = preview.image
    assert image.ndim == 3 and image.shape[-1] == 3 and image.dtype == torch.float32
    assert 0 <= float(image.min()) and float(image.max()) <= 1


@pytest.mark.parametrize("shape,tiling", [
    ((3, 21, 40), TileCountConfig(height=AxisTiling(3, 8))),
    ((3, 8, 8), TileCountConfig(width=AxisTiling(9, 0))),
    ((4, 8, 8), TileCountConfig(frames=AxisTiling(4, 2))),
])
def test_a_refused_layout_raises_the_planners_message(shape, tiling):
    with pytest.raises(TilingError) as planned:
        plan_tiles(shape, tiling.axes, VIDEO_AXES)
    with pytest.raises(TilingError) as previewed:
        preview_tiles(shape, tiling)
    assert str(previewed.value) == str(planned.value)
    assert "the largest overlap" in str(previewed.value) or "tiles" in str(previewed.value)


def test_an_overlapping_third_tile_shows_as_not_exact():
    # Upstream's (21, 3, 8) split on the height, built by hand: the middle tile is shorter than twice the
    # overlap, so its ramps meet and the sum exceeds one (upstream blends it; the planner refuses it).
    height = (Interval(0, 13, 0, 8), Interval(5, 17, 8, 8), Interval(9, 21, 8, 0))
    plan = TilePlan((1, 21, 4), ((Interval(0, 1),), height, (Interval(0, 4),)))
    preview = render_plan(plan)
    assert preview.max_deviation > 0.04, preview.max_deviation
    heat = _heat_panel(preview)
    exact = (heat == torch.tensor(EXACT_COLOUR)).all(dim=-1)
    assert not exact.all(), "a wrong blend must not look exact"
    assert "do NOT sum to 1" in preview.summary


def test_heat_colours_distinguish_above_below_and_exact():
    c = heat_colours(torch.tensor([0.0, 1e-7, 0.01, -0.01]))
    assert torch.equal(c[0], torch.tensor(EXACT_COLOUR)) and torch.equal(c[1], torch.tensor(EXACT_COLOUR))
    assert c[2, 0] > c[2, 2], "above one is warm"
    assert c[3, 2] > c[3, 0], "below one is cool"


def test_position_range_names_each_axis_a_tile_leaves():
    from ltx_tdp.tiling import PositionRange

    positions = PositionRange.of_max_pos([20, 2048, 2048])
    assert positions.excess((16, 64, 64), frame_rate=25) == []
    assert positions.excess((16, 65, 64), frame_rate=25) == ["height 2080 px > 2048 px"]
    # 64 latent frames = 505 pixel frames = 20.2 s at 25 fps; time is checked only with a frame rate.
    assert positions.excess((64, 1, 1), frame_rate=25) == ["length 20.2 s > 20 s"]
    assert positions.excess((64, 1, 1)) == []


def test_the_range_check_of_a_plan_looks_at_its_largest_tile():
    from ltx_tdp.tiling import PositionRange

    positions = PositionRange.of_max_pos([20, 2048, 2048])
    # 130 cells in 2 tiles overlapping by 5: the first is 68 cells, 2176 px; in 4 tiles at most 37 cells.
    two = plan_tiles((64, 68, 130), TileCountConfig(height=AxisTiling(2, 5), width=AxisTiling(2, 5)).axes, VIDEO_AXES)
    four = plan_tiles((64, 68, 130), TileCountConfig(height=AxisTiling(2, 5), width=AxisTiling(4, 5)).axes, VIDEO_AXES)
    assert positions.check(two) == "outside the model's trained position range (width 2176 px > 2048 px)", \
        positions.check(two)
    assert positions.check(four) is None, positions.check(four)
    assert positions.check(four, frame_rate=25) == "outside the model's trained position range (length 20.2 s > 20 s)"
