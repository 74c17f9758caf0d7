"""Splitting one axis into tiles of at most a size with an exact overlap (split_by_size, tiles_for_size): the fewest
tiles, windows summing to one, and a refusal where a tile cannot hold the overlap at both ends."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import Interval, TilingError, split_by_size, tiles_for_size
from ltx_tdp_devkit.upstream_split import TOL, pack_weight_sum, spans_of


def fewest_tiles(length: int, size: int, overlap: int) -> int:
    """Smallest n whose n tiles of `size`, overlapping by `overlap`, reach `length`."""
    n = 1
    while n * size - (n - 1) * overlap < length:
        n += 1
    return n


@st.composite
def size_layouts(draw, holdable: bool):
    """(length, size, overlap) where a tile of `size` can hold the overlap at both ends, or cannot and must split."""
    size = draw(st.integers(1, 64))
    if holdable:
        overlap = draw(st.integers(0, min(40, (size - 1) // 2)))
        length = draw(st.integers(1, 200))
    else:
        overlap = draw(st.integers((size + 1) // 2, (size + 1) // 2 + 40))
        length = draw(st.integers(size + 1, size + 200))
    return length, size, overlap


@settings(max_examples=1500, deadline=None)
@given(size_layouts(holdable=True))
@example((18, 11, 5))
def test_split_by_size_uses_the_fewest_tiles_no_larger_than_size_and_sums_to_one(layout):
    length, size, overlap = layout
    try:
        got = split_by_size(length, size, overlap, "width")
    except TilingError as refused:
        pytest.fail(f"({length}, {size}, {overlap}) refused although 2*{overlap} < {size}: {refused}")
    longest = max(i.length for i in got)
    assert longest <= size, f"({length}, {size}, {overlap}): a tile is {longest} cells, more than {size}"
    want = fewest_tiles(length, size, overlap)
    assert len(got) == want, f"({length}, {size}, {overlap}): {len(got)} tiles where {want} suffice"
    assert len(got) == tiles_for_size(length, size, overlap), "split_by_size disagrees with tiles_for_size"
    error = (pack_weight_sum(got, length) - 1.0).abs().max().item()
    assert error <= TOL, f"({length}, {size}, {overlap}): window sum is off by {error:.2e}"


@settings(max_examples=300, deadline=None)
@given(size_layouts(holdable=False))
def test_split_by_size_refuses_an_overlap_a_tile_cannot_hold_at_both_ends(layout):
    length, size, overlap = layout
    with pytest.raises(TilingError, match="width"):
        split_by_size(length, size, overlap, "width")


def test_an_axis_that_fits_in_one_tile_is_one_tile_without_ramps():
    assert split_by_size(20, 32, 30) == (Interval(0, 20, 0, 0),), "20 cells fit one tile of 32"


def test_split_by_size_accepts_18_cells_in_tiles_of_11_with_overlap_5():
    """Three tiles of at most 11 cells overlapping by 5 can cover 18 cells exactly, e.g. [0,8) [3,13) [8,18):
    the interior tile holds both 5-cell ramps. Upstream's even split (10/9/9 cells) cannot, so a size split
    must not simply hand the count to split_by_count."""
    try:
        got = split_by_size(18, 11, 5, "width")
    except TilingError as refused:
        pytest.fail(f"split_by_size(18, 11, 5) refused a layout that exists: {refused}")
    error = (pack_weight_sum(got, 18) - 1.0).abs().max().item()
    assert len(got) == 3 and max(i.length for i in got) <= 11, f"got {spans_of(got)}"
    assert error <= TOL, f"window sum is off by {error:.2e}"
