"""The tile-size config: tile sizes in pixels (and frames) with a minimum overlap in latent cells, which on any
latent is exactly the count config it resolves to."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import (LTX_GEOMETRY, VIDEO_AXES, AxisTileSize, AxisTiling, TileCountConfig, TileSizeConfig,
                            TilingError, plan_tiles)


def test_pixels_round_down_to_whole_latent_cells():
    config = TileSizeConfig.of_pixels(2048, 1100, 5, frames=121, min_frames_overlap=2)
    assert config.width == AxisTileSize(64, 5, overlap_is_minimum=True), "2048 px is 64 cells of 32 px"
    assert config.height == AxisTileSize(34, 5, overlap_is_minimum=True), "1100 px rounds down to 34 cells (1088 px)"
    assert config.frames == AxisTileSize(15, 2, overlap_is_minimum=True), "121 frames hold at most 15 latent frames"


def test_no_tile_frames_keeps_the_whole_clip_in_every_tile():
    assert TileSizeConfig.of_pixels(2048, 2048, 5).frames == AxisTiling(), "tile_frames 0: one tile along time"


def test_a_3840_x_2176_latent_resolves_to_2_x_2_tiles_of_64_cells():
    config = TileSizeConfig.of_pixels(2048, 2048, 5)
    shape = LTX_GEOMETRY.latent_shape(121, 2176, 3840)
    assert config.resolve(shape) == TileCountConfig(AxisTiling(1, 0), AxisTiling(2, 60), AxisTiling(2, 8)), \
        f"3840 x 2176 in 2048 px tiles resolved to {config.resolve(shape)}"


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(width_px=300, height_px=2048, min_overlap=5),
     r"width: a tile of 300 px is 9 latent cell\(s\) of 32 px, too short for a minimum overlap of 5 cells at both "
     r"ends; use tiles of at least 352 px or a minimum overlap of at most 4"),
    (dict(width_px=2048, height_px=20, min_overlap=0),
     r"height: a tile of 20 px is less than one latent cell \(32 px\)"),
    (dict(width_px=2048, height_px=2048, min_overlap=1, frames=16, min_frames_overlap=1),
     r"frames: a tile of 16 frames is 2 latent cell\(s\) of 8 frames, too short for a minimum overlap of 1 cells"),
    (dict(width_px=2048, height_px=2048, min_overlap=-1), r"height: the minimum overlap cannot be negative"),
])
def test_a_tile_too_small_for_its_overlap_is_refused_in_the_units_the_user_typed(kwargs, message):
    with pytest.raises(TilingError, match=message):
        TileSizeConfig.of_pixels(**kwargs)


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.integers(1, 40), st.integers(1, 90), st.integers(1, 130)),
       st.integers(2, 70).map(lambda c: 32 * c), st.integers(2, 70).map(lambda c: 32 * c), st.integers(0, 6),
       st.sampled_from([0, 24, 40, 64, 121]))
def test_on_any_latent_the_size_config_plans_exactly_the_count_config_it_resolves_to(shape, width, height, overlap,
                                                                                      frames):
    try:
        config = TileSizeConfig.of_pixels(width, height, overlap, frames, min_frames_overlap=1)
    except TilingError:
        return  # a tile too short for its overlap: refused when made (test above)
    try:
        counts = config.resolve(shape)
    except TilingError as refused:
        with pytest.raises(TilingError) as planned:
            plan_tiles(shape, config.axes, VIDEO_AXES)
        assert str(planned.value) == str(refused), "the patcher and resolve refuse with different messages"
        return
    plan = plan_tiles(shape, config.axes, VIDEO_AXES)
    assert plan == plan_tiles(shape, counts.axes, VIDEO_AXES), f"{shape}: the size config's plan is not {counts}'s"
    cells = [a.size if isinstance(a, AxisTileSize) else n for a, n in zip(config.axes, shape)]
    longest = [max(i.length for i in axis) for axis in plan.axis_intervals]
    assert all(l <= c for l, c in zip(longest, cells)), f"{shape}: tiles of {longest} cells exceed {cells}"
    for a, c in zip(config.axes, counts.axes):
        if isinstance(a, AxisTileSize):
            assert c.overlap >= a.overlap, f"{shape}: overlap {c.overlap} below the minimum {a.overlap}"
    assert (plan.weight_sum() - 1).abs().max() <= 1e-6, f"{shape}: the blend weights do not sum to one"
