"""LTX's latent geometry: causal time, plain space, owned pixel spans that partition an axis, and the one
geometry the model, the VAE, the preview and the reach code all use."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import TilingError, video_grid_shape, video_part
from ltx_tdp.tiling.geometry import LTX_GEOMETRY, AxisScale, LatentGeometry

TIME, SPACE = LTX_GEOMETRY.frames, LTX_GEOMETRY.height


@pytest.mark.parametrize("cells, frames", [(1, 1), (2, 9), (4, 25), (16, 121)])
def test_causal_time_gives_one_frame_for_the_first_latent_frame_and_eight_for_each_other(cells, frames):
    assert TIME.pixel_length(cells) == frames, f"{cells} latent frames gave {TIME.pixel_length(cells)} frames"
    assert TIME.cell_length(frames) == cells, f"{frames} frames mapped back to {TIME.cell_length(frames)} cells"


def test_space_is_a_plain_factor_of_32():
    assert SPACE.pixel_length(68) == 2176 and SPACE.cell_length(2176) == 68


@pytest.mark.parametrize("scale, pixels", [(TIME, 10), (SPACE, 33)])
def test_a_pixel_count_no_latent_count_makes_is_refused(scale, pixels):
    with pytest.raises(TilingError, match="whole number of latent cells"):
        scale.cell_length(pixels)


@pytest.mark.parametrize("scale", [TIME, SPACE, AxisScale(4, causal=True)])
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(1, 40), min_size=1, max_size=6, unique=True), extra=st.integers(1, 5))
def test_owned_pixel_spans_of_a_latent_partition_partition_the_pixel_axis(scale, cuts, extra):
    cells = max(cuts) + extra
    bounds = [0, *sorted(cuts), cells]
    spans = [scale.owned_pixels(a, b) for a, b in zip(bounds, bounds[1:])]
    assert spans[0].start == 0 and spans[-1].end == scale.pixel_length(cells), f"spans {spans}"
    assert all(s.end == t.start for s, t in zip(spans, spans[1:])), f"gap or overlap in {spans}"


def test_ltx_geometry_is_8_causal_frames_and_32_pixels_in_space():
    assert LTX_GEOMETRY == LatentGeometry.of_factors((8, 32, 32), causal_time=True)
    assert LTX_GEOMETRY.pixel_shape((16, 68, 120)) == (121, 2176, 3840)
    assert LTX_GEOMETRY.latent_shape(121, 2176, 3840) == (16, 68, 120)
    assert LTX_GEOMETRY.latent_shape(124, 2200, 3850) == (16, 68, 120), "extra pixels are dropped, as encoders do"


@pytest.mark.parametrize("causal", [True, False])
@settings(deadline=None)
@given(start=st.integers(0, 30), length=st.integers(1, 10))
def test_pixel_bounds_are_the_models_position_map(causal, start, length):
    # LTX's transformers map latent frame f to pixel max(8 f + 1 - 8, 0) with the causal fix and 8 f without;
    # space to 32 c. A tile's [start, end) cells start and end where the model puts those cells.
    geometry = LatentGeometry.of_factors((8, 32, 32), causal_time=causal)
    end = start + length

    def model(f: int) -> float:
        return float(max(8 * f + 1 - 8, 0)) if causal else float(8 * f)

    assert geometry.pixel_bounds(start, end, 0) == (model(start), model(end))
    assert geometry.pixel_bounds(start, end, 1) == (32.0 * start, 32.0 * end)


def test_the_video_part_of_a_nested_audio_video_latent_is_its_first_tensor():
    class Nested:
        is_nested = True

        def __init__(self, tensors):
            self.tensors = tensors

    video, audio = torch.zeros(1, 128, 3, 4, 5), torch.zeros(1, 8, 7, 16)
    assert video_part(Nested([video, audio])) is video and video_part(video) is video
    assert video_grid_shape(Nested([video, audio])) == (3, 4, 5)
    with pytest.raises(ValueError, match=r"expected a video latent .* got shape \(1, 4, 8, 8\)"):
        video_grid_shape(torch.zeros(1, 4, 8, 8))


def test_pixel_sizes_map_to_ltx_latent_cells():
    assert LTX_GEOMETRY.latent_shape(1, 32, 32) == (1, 1, 1)
    assert LTX_GEOMETRY.latent_shape(9, 64, 96) == (2, 2, 3)
    assert LTX_GEOMETRY.latent_shape(97, 1088, 1920) == (13, 34, 60)


def test_video_grid_shape_reads_a_video_latent_and_refuses_an_image_latent():
    assert video_grid_shape(torch.zeros(1, 128, 3, 4, 5)) == (3, 4, 5)
    with pytest.raises(ValueError, match="video latent"):
        video_grid_shape(torch.zeros(1, 4, 8, 8))
