"""Tiled-decode plans: the cells a tile decodes, causal chunks, crops that line up, windows that sum to one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import (
    AxisTileSize, AxisTiling, Interval, TilingError, blend_tiles, max_valid_overlap, plan_tiles, window_1d,
)
from ltx_tdp.tiling.decode_plan import cells_to_decode, pixel_tiles, plan_decode
from ltx_tdp.tiling.geometry import LTX_GEOMETRY, AxisScale

TIME, SPACE = LTX_GEOMETRY.frames, LTX_GEOMETRY.height


# --- one axis -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [TIME, SPACE, AxisScale(4, causal=True)])
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cells=st.integers(1, 40), context=st.integers(0, 4))
def test_decoding_the_chosen_cells_covers_the_wanted_pixels(scale, data, cells, context):
    length = scale.pixel_length(cells)
    start = data.draw(st.integers(0, length - 1))
    end = data.draw(st.integers(start + 1, length))
    src = cells_to_decode(scale, start, end, cells, context)
    first_pixel = scale.factor * src.start  # decoding [c, d) alone starts at pixel factor*c of the full decode
    last_pixel = first_pixel + scale.pixel_length(src.length)
    assert 0 <= src.start < src.end <= cells, f"{src} outside 0..{cells}"
    assert first_pixel <= start and end <= last_pixel, (
        f"[{start},{end}) not inside decoded [{first_pixel},{last_pixel})"
    )
    owner_first = -(-start // scale.factor) if scale.causal else start // scale.factor
    owner_last = -(-(end - 1) // scale.factor) if scale.causal else (end - 1) // scale.factor
    low = min(start // scale.factor, owner_first - context) if scale.causal else owner_first - context
    assert (src.start, src.end) == (max(0, low), min(cells, owner_last + 1 + context)), (
        f"context {context} around owning cells [{owner_first}, {owner_last}] gave {src}"
    )


def test_a_causal_chunk_starting_inside_the_clip_is_decoded_from_the_frame_before_it():
    # Frames [49, 121) are owned by latent frames 7..15 (latent frame 7 owns frames 49..56). Decoded from
    # latent frame 7 alone a chunk would start at frame 56, so even without context it starts one latent
    # frame earlier, at frame 48; that frame counts as one frame of context.
    assert cells_to_decode(TIME, 49, 121, 16, context=0) == Interval(6, 16)
    assert cells_to_decode(TIME, 49, 121, 16, context=1) == Interval(6, 16)
    assert cells_to_decode(TIME, 49, 113, 16, context=2) == Interval(5, 16)


# --- plans ----------------------------------------------------------------------------------------------------


def ltx_plan(latent=(16, 68, 120), tile=(80, 768, 768), overlap=(24, 64, 64), context=(1, 1, 1)):
    return plan_decode(latent, [AxisTileSize(t, o) for t, o in zip(tile, overlap)], context)


def axis_weight_sum(intervals, length):
    total = torch.zeros(length)
    for interval in intervals:
        total[interval.slice] += window_1d(interval)
    return total


def test_the_4k_default_plan_covers_3840x2160x121_with_windows_summing_to_one():
    plan = ltx_plan()
    assert plan.pixel_shape == (121, 2176, 3840), f"pixel grid {plan.pixel_shape}"
    assert plan.pixels.counts == (2, 3, 6), f"tile counts {plan.pixels.counts}"
    # The 3-D window is the product of the per-axis ones and the tiles are every combination of per-axis
    # intervals, so the 3-D sum is the product of the per-axis sums (a 4 GB grid is not needed to check it).
    for name, intervals, length in zip(("frames", "height", "width"), plan.pixels.axis_intervals, plan.pixel_shape):
        total = axis_weight_sum(intervals, length)
        assert torch.allclose(total, torch.ones(length), rtol=0, atol=1e-6), (
            f"{name}: windows sum to {total.min().item()}..{total.max().item()}"
        )


def test_tiles_start_and_end_on_latent_cell_boundaries_so_no_tile_decodes_a_partial_cell():
    plan = ltx_plan()
    for (frames, height, width) in (t.intervals for t in plan.pixels.tiles):
        assert frames.start == 0 or frames.start % 8 == 1, f"chunk starts at frame {frames.start}"
        assert frames.end == 121 or frames.end % 8 == 1, f"chunk ends at frame {frames.end}"
        assert height.start % 32 == 0 and height.end % 32 == 0 and width.start % 32 == 0 and width.end % 32 == 0, (
            f"tile {height}, {width} cuts through latent cells"
        )
    sources = {plan.source(t).latent_shape for t in plan.pixels.tiles}
    # Chunks of 10 (or 9) latent frames + 1 of context at each inner side (the causal head is that context);
    # 768 px tiles: 24 cells of height (3 tiles) and 22 of width (6 tiles) + 1 cell of context at each inner side.
    assert plan.largest_source() == (11, 26, 24), f"largest decoded block {plan.largest_source()} of {sources}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(latent=st.tuples(st.integers(1, 30), st.integers(1, 30)), data=st.data())
def test_a_latent_plan_mapped_to_pixels_overlaps_by_factor_times_the_cells_and_sums_to_one(latent, data):
    specs = []
    for cells in latent:
        tiles = data.draw(st.integers(1, cells))
        overlap = data.draw(st.integers(0, max(0, max_valid_overlap(cells, tiles))))
        specs.append(AxisTiling(tiles, overlap))
    cells_plan = plan_tiles(latent, specs, ("frames", "width"))
    pixels = pixel_tiles(cells_plan, (TIME, SPACE))
    for axis, (scale, spec) in enumerate(zip((TIME, SPACE), specs)):
        intervals = pixels.axis_intervals[axis]
        for left, right in zip(intervals, intervals[1:]):
            assert left.end - right.start == spec.overlap * scale.factor == left.ramp_out == right.ramp_in, (
                f"axis {axis}: neighbours {left} {right} for {spec.overlap} cells of overlap"
            )
        total = axis_weight_sum(intervals, pixels.shape[axis])
        assert torch.allclose(total, torch.ones_like(total), rtol=0, atol=1e-6), (
            f"axis {axis}: windows sum to {total.min().item()}..{total.max().item()}"
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(latent=st.tuples(st.integers(1, 12), st.integers(1, 6), st.integers(1, 6)),
       tile=st.tuples(st.integers(9, 60), st.integers(33, 160), st.integers(33, 160)),
       overlap_fraction=st.tuples(st.floats(0, 0.49), st.floats(0, 0.49), st.floats(0, 0.49)),
       context=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)))
def test_every_accepted_plan_sums_to_one_and_every_crop_holds_its_tile(latent, tile, overlap_fraction, context):
    overlap = tuple(int(t * f) for t, f in zip(tile, overlap_fraction))
    try:
        plan = ltx_plan(latent, tile, overlap, context)
    except TilingError as err:
        assert "overlap" in str(err), f"refusal without a hint: {err}"
        return
    total = plan.pixels.weight_sum()
    assert torch.allclose(total, torch.ones_like(total), rtol=0, atol=1e-6), f"windows sum to {total.max().item()}"
    for tile_ in plan.pixels.tiles:
        src = plan.source(tile_)
        crop_shape = tuple(c.stop - c.start for c in src.crop)
        assert crop_shape == tile_.shape, f"crop {crop_shape} != tile {tile_.shape}"
        assert all(c.start >= 0 and c.stop <= n for c, n in zip(src.crop, src.decoded_shape)), (
            f"crop {src.crop} outside the decoded block {src.decoded_shape}"
        )


def coordinate_decoder(scales):
    """A stand-in decoder whose pixels carry their own global coordinates, decoded exactly as an LTX VAE
    maps cells: latent channel a holds the global cell index on axis a; output channel a holds the global
    pixel index on axis a, computed only from the block it is given (causal first frame included)."""

    def decode(block: torch.Tensor) -> torch.Tensor:
        axes = []
        for axis, scale in enumerate(scales):
            # The block's global cell indices along `axis` (constant along the other axes).
            line = block[0, axis].movedim(axis, 0).reshape(block.shape[2 + axis], -1)[:, 0]
            n = scale.pixel_length(line.numel())
            pixels = scale.factor * line[0] + torch.arange(n, dtype=torch.float32)
            shape = [1, 1, 1]
            shape[axis] = n
            axes.append(pixels.reshape(shape))
        return torch.stack(torch.broadcast_tensors(*axes))[None]

    return decode


def grid(shape):
    """(axes, *shape) fp32: channel a holds each cell's index along axis a."""
    return torch.stack(torch.meshgrid(*[torch.arange(n, dtype=torch.float32) for n in shape], indexing="ij"))


def test_tiles_cropped_from_context_blocks_blend_back_to_exact_global_coordinates():
    latent_shape = (9, 5, 6)
    plan = ltx_plan(latent_shape, tile=(24, 96, 96), overlap=(8, 32, 32), context=(1, 1, 0))
    assert all(c > 1 for c in plan.pixels.counts), f"expected several tiles per axis, got {plan.pixels.counts}"
    coords = grid(latent_shape)
    decode = coordinate_decoder(plan.scales)

    def evaluate(tile):
        src = plan.source(tile)
        block = decode(coords[(Ellipsis, *src.latent)][None])
        assert tuple(block.shape[2:]) == src.decoded_shape, f"decoded {tuple(block.shape[2:])} != {src.decoded_shape}"
        return block[(Ellipsis, *src.crop)]

    got = blend_tiles(plan.pixels, evaluate)
    want = grid(plan.pixel_shape)[None]
    err = (got - want).abs().max().item()
    assert err < 1e-3, f"blended coordinates off by up to {err}"


# --- refusals -------------------------------------------------------------------------------------------------


def test_a_tile_not_longer_than_twice_its_overlap_is_refused_in_pixels():
    with pytest.raises(TilingError, match=r"height: a tile of 128 pixels is too small for an overlap of 64 pixels"):
        ltx_plan((2, 8, 8), tile=(80, 128, 128), overlap=(24, 64, 64))


def test_a_temporal_tile_smaller_than_its_overlap_is_refused_in_frames():
    with pytest.raises(TilingError, match=r"frames: a tile of 16 frames .* overlap of 24 frames"):
        ltx_plan((2, 2, 2), tile=(16, 768, 768), overlap=(24, 64, 64))


def test_the_refusal_is_the_same_when_one_tile_would_cover_the_axis():
    # A bad setting is refused on a short clip too, so it does not start failing when the clip grows.
    with pytest.raises(TilingError, match="too small for an overlap"):
        ltx_plan((1, 1, 1), tile=(80, 100, 768), overlap=(24, 64, 64))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cells=st.integers(1, 200), tile=st.integers(1, 1000), overlap=st.integers(0, 500))
def test_any_tile_longer_than_twice_its_overlap_in_whole_cells_splits_any_length(cells, tile, overlap):
    spec = AxisTileSize(tile, overlap)
    whole, whole_overlap = max(1, tile // 32), -(-overlap // 32)
    if tile <= 2 * overlap or whole <= 2 * whole_overlap:
        with pytest.raises(TilingError, match="too small for an overlap|rounds up to"):
            plan_decode((1, 1, cells), [AxisTileSize(80), AxisTileSize(32), spec], (0, 0, 0))
        return
    plan = plan_decode((1, 1, cells), [AxisTileSize(80), AxisTileSize(32), spec], (0, 0, 0))
    intervals = plan.pixels.axis_intervals[2]
    assert max(i.length for i in intervals) <= max(tile, 32), f"a tile longer than {tile} px: {intervals}"
    assert intervals[0].start == 0 and intervals[-1].end == 32 * cells, f"{intervals} do not cover {cells} cells"


def test_an_overlap_that_rounds_up_past_half_the_tile_is_refused_with_sizes_that_work():
    # 100 px is 3 whole cells; 40 px of overlap rounds up to 2 cells, more than half of 3.
    with pytest.raises(TilingError, match=r"width: .* 100 pixels is 3 cell\(s\) .* 40 pixels rounds up to 2.* "
                                          r"at least 160 pixels or an overlap of at most 32 pixels"):
        ltx_plan((2, 2, 8), tile=(80, 768, 100), overlap=(24, 64, 40))


def test_negative_context_is_refused():
    with pytest.raises(TilingError, match="context cannot be negative"):
        ltx_plan((2, 2, 2), context=(0, -1, 0))
