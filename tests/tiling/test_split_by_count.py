"""Splitting one axis into a count of tiles (split_by_count, max_valid_overlap): upstream LTX-2's intervals, and a
refusal for every layout that would not blend to one. The reference (upstream's unchecked arithmetic, written
independently of the pack) is ltx_tdp_devkit.upstream_split.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import Interval, TilingError, max_valid_overlap, split_by_count
from ltx_tdp_devkit.upstream_split import (TOL, pack_weight_sum, spans_of, upstream_spans, upstream_stride,
                                           upstream_weight_sum)


# --- upstream's own examples ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "tiles", "overlap", "expected"),
    [
        (21, 2, 8, [(0, 15), (7, 21)]),
        (34, 2, 6, [(0, 20), (14, 34)]),
        (20, 4, 2, [(0, 7), (5, 12), (10, 16), (14, 20)]),
    ],
    ids=["21-cells-2-tiles-ov8", "34-cells-2-tiles-ov6", "20-cells-4-tiles-ov2"],
)
def test_split_by_count_reproduces_upstream_seed_intervals(length, tiles, overlap, expected):
    got = spans_of(split_by_count(length, tiles, overlap, "width"))
    assert got == expected, f"split_by_count({length}, {tiles}, {overlap}) gave {got}, upstream gives {expected}"


def test_split_by_count_puts_ramps_only_on_inner_ends():
    got = [(i.ramp_in, i.ramp_out) for i in split_by_count(20, 4, 2)]
    assert got == [(0, 2), (2, 2), (2, 2), (2, 0)], f"ramps (in, out) per tile were {got}"


def test_three_tiles_of_21_cells_with_overlap_8_are_refused_naming_overlap_5():
    with pytest.raises(TilingError) as refused:
        split_by_count(21, 3, 8, "width")
    message = str(refused.value)
    assert "width" in message and "21" in message, f"message does not name the axis and its length: {message!r}"
    assert "the largest overlap that keeps the blend exact is 5" in message, f"message was {message!r}"


def test_four_tiles_of_21_cells_with_overlap_8_are_refused_naming_overlap_4():
    with pytest.raises(TilingError) as refused:
        split_by_count(21, 4, 8, "height")
    message = str(refused.value)
    assert "height" in message and "21" in message and "4 tiles" in message, f"message was {message!r}"
    assert "the largest overlap that keeps the blend exact is 4" in message, f"message was {message!r}"


@pytest.mark.parametrize(("tiles", "upstream_peak"), [(3, 1.074), (4, 1.161)])
def test_refused_seed_layouts_would_brighten_seams_upstream(tiles, upstream_peak):
    """The reference reproduces upstream's unchecked blend: (21,3,8) sums to 1.074, (21,4,8) to 1.161."""
    peak = max(upstream_weight_sum(21, tiles, 8))
    assert peak == pytest.approx(upstream_peak, abs=1e-3), f"upstream weight sum peaks at {peak:.4f}"


def test_more_tiles_than_cells_is_refused_with_the_most_tiles_that_fit():
    with pytest.raises(TilingError, match="use at most 5 tiles"):
        split_by_count(5, 6, 0, "frames")


def test_one_tile_is_the_whole_axis_whatever_the_overlap():
    assert split_by_count(9, 1, 4) == (Interval(0, 9, 0, 0),), "one tile must be [0, 9) without ramps"


def test_tiling_error_is_a_value_error():
    assert issubclass(TilingError, ValueError), "TilingError must stay catchable as ValueError"


# --- properties over thousands of layouts ----------------------------------------------------------------

layouts = st.tuples(st.integers(1, 200), st.integers(1, 16), st.integers(0, 40))


@settings(max_examples=2500, deadline=None)
@given(layouts)
@example((21, 3, 8))
@example((21, 4, 8))
@example((20, 4, 2))
@example((5, 5, 1))
def test_a_layout_is_accepted_exactly_when_upstreams_blend_would_sum_to_one(layout):
    """Accepted: upstream's intervals, overlapping by exactly ov, windows summing to one.
    Refused: upstream's unchecked blend is off somewhere, or its intervals are degenerate (s - ov <= 0)."""
    length, tiles, overlap = layout
    try:
        got = split_by_count(length, tiles, overlap, "width")
    except TilingError as refused:
        message = str(refused)
        assert "width" in message and str(length) in message, f"refusal does not name axis/length: {message!r}"
        if tiles > length:
            return
        stride = upstream_stride(length, tiles, overlap)
        if stride <= 0:
            return  # degenerate: upstream's tiles do not advance (or are shorter than their ramps)
        deviation = max(abs(w - 1.0) for w in upstream_weight_sum(length, tiles, overlap))
        assert deviation > TOL, (
            f"{layout} was refused although upstream's stride is {stride} and its weight sum is off by only "
            f"{deviation:.2e}"
        )
        return

    assert tiles <= length, f"{layout}: {tiles} tiles accepted on {length} cells"
    expected = upstream_spans(length, tiles, overlap) if tiles > 1 else [(0, length)]
    assert spans_of(got) == expected, f"{layout}: intervals {spans_of(got)} are not upstream's {expected}"
    assert got[0].start == 0 and got[-1].end == length, f"{layout}: tiles cover [{got[0].start}, {got[-1].end})"
    for left, right in zip(got, got[1:]):
        assert left.end - right.start == overlap, f"{layout}: neighbours overlap by {left.end - right.start}"
    error = (pack_weight_sum(got, length) - 1.0).abs().max().item()
    assert error <= TOL, f"{layout}: window sum is off by {error:.2e}"


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 200), st.integers(1, 16))
def test_max_valid_overlap_is_accepted_and_one_more_is_refused(length, tiles):
    best = max_valid_overlap(length, tiles)
    if tiles > length:
        assert best == -1, f"{tiles} tiles on {length} cells: max_valid_overlap gave {best}, expected -1"
        return
    assert best >= 0, f"{tiles} tiles on {length} cells: overlap 0 always works, got {best}"
    split_by_count(length, tiles, best)  # must not raise
    if tiles > 1:
        with pytest.raises(TilingError):
            split_by_count(length, tiles, best + 1)


def test_every_overlap_up_to_the_largest_valid_one_is_accepted():
    """Validity is monotone in the overlap, so 'the largest overlap that works' is a useful thing to say."""
    for length in range(1, 61):
        for tiles in range(2, min(length, 8) + 1):
            best = max_valid_overlap(length, tiles)
            for overlap in range(best + 1):
                split_by_count(length, tiles, overlap)  # must not raise
