"""Trapezoid blend windows: 1-D ramps k/(r+1), separable N-D products, and 3-D plans that sum to one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import VIDEO_AXES, AxisTiling, Interval, max_valid_overlap, plan_tiles, window_1d, window_nd


def test_left_ramp_rises_by_one_over_r_plus_one_and_excludes_both_ends():
    got = window_1d(Interval(0, 6, ramp_in=3))
    want = torch.tensor([1 / 4, 2 / 4, 3 / 4, 1, 1, 1])
    assert torch.allclose(got, want, rtol=0, atol=1e-7), f"window was {got.tolist()}"


def test_right_ramp_is_the_mirror_of_the_left_one():
    got = window_1d(Interval(10, 16, ramp_out=3))
    want = torch.tensor([1, 1, 1, 3 / 4, 2 / 4, 1 / 4])
    assert torch.allclose(got, want, rtol=0, atol=1e-7), f"window was {got.tolist()}"


def test_a_tile_with_ramps_at_both_ends_has_a_flat_top_between_them():
    got = window_1d(Interval(5, 13, ramp_in=2, ramp_out=3))
    want = torch.tensor([1 / 3, 2 / 3, 1, 1, 1, 3 / 4, 2 / 4, 1 / 4])
    assert torch.allclose(got, want, rtol=0, atol=1e-7), f"window was {got.tolist()}"


def test_a_window_without_ramps_is_all_ones():
    got = window_1d(Interval(3, 10))
    assert torch.equal(got, torch.ones(7)), f"window was {got.tolist()}"


@pytest.mark.parametrize("ramp", [1, 2, 5, 8, 63])
def test_a_falling_and_a_rising_ramp_over_the_same_cells_sum_to_exactly_one(ramp):
    falling = window_1d(Interval(0, ramp + 1, ramp_out=ramp))[1:]
    rising = window_1d(Interval(0, ramp + 1, ramp_in=ramp))[:-1]
    total = falling + rising
    assert torch.equal(total, torch.ones(ramp)), f"ramp {ramp}: off by {(total - 1).abs().max().item():.2e}"


@pytest.mark.parametrize("interval", [Interval(0, 4), Interval(2, 9, 3, 2)])
def test_windows_are_fp32_with_the_intervals_length(interval):
    got = window_1d(interval)
    assert got.dtype == torch.float32, f"window dtype is {got.dtype}"
    assert got.shape == (interval.length,), f"window shape is {tuple(got.shape)}"


def test_an_nd_window_is_the_outer_product_of_the_1d_windows():
    intervals = (Interval(0, 5, 0, 2), Interval(3, 10, 3, 3), Interval(7, 13, 2, 0))
    f, h, w = (window_1d(i) for i in intervals)
    got = window_nd(intervals)
    want = torch.einsum("f,h,w->fhw", f, h, w)
    assert got.dtype == torch.float32, f"window dtype is {got.dtype}"
    assert got.shape == (5, 7, 6), f"window shape is {tuple(got.shape)}"
    error = (got - want).abs().max().item()
    assert error <= 1e-7, f"window_nd differs from the outer product by {error:.2e}"


def test_a_one_axis_nd_window_is_the_1d_window():
    interval = Interval(2, 9, 3, 2)
    assert torch.equal(window_nd((interval,)), window_1d(interval)), "window_nd of one interval must be window_1d"


@st.composite
def accepted_axis(draw, max_length: int = 24, max_tiles: int = 4):
    """(length, AxisTiling) with an overlap anywhere from 0 to the largest one that is accepted."""
    length = draw(st.integers(1, max_length))
    tiles = draw(st.integers(1, min(max_tiles, length)))
    overlap = draw(st.integers(0, max(0, max_valid_overlap(length, tiles))))
    return length, AxisTiling(tiles, overlap)


@settings(max_examples=120, deadline=None)
@given(st.tuples(accepted_axis(), accepted_axis(), accepted_axis()))
def test_every_accepted_3d_plan_has_weights_summing_to_one_at_every_cell(axes):
    shape = tuple(length for length, _ in axes)
    plan = plan_tiles(shape, [spec for _, spec in axes], VIDEO_AXES)
    error = (plan.weight_sum() - 1.0).abs().max().item()
    assert error <= 1e-6, f"{shape} with {[spec for _, spec in axes]}: weight sum is off by {error:.2e}"
