"""Splitting one axis: upstream LTX-2's intervals, and a refusal for every layout that would not blend to one.

The reference functions at the top are written from upstream LTX-2's split formula (`ltx_core/tiling.py`:
total = dim + ov*(n-1), s = total // n, tile i = [i*(s-ov) + min(i, total % n), +s (+1 while i < total % n))),
independently of the pack: they are
what upstream computes without any check, so the tests can show that a refused layout really would
have brightened (or broken) the seams, and an accepted one really is upstream's split.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import (
    AxisTileSize,
    AxisTiling,
    Interval,
    TilingError,
    count_for_size,
    max_valid_overlap,
    split_by_count,
    split_by_size,
    tiles_for_size,
    window_1d,
)

TOL = 1e-6


# --- independent reference: upstream's unchecked arithmetic -------------------------------------------


def upstream_spans(length: int, tiles: int, overlap: int) -> list[tuple[int, int]]:
    """Upstream's raw [start, end) per tile: total = L + ov(n-1), s = total // n, r = total % n."""
    total = length + overlap * (tiles - 1)
    s, r = divmod(total, tiles)
    spans = []
    for i in range(tiles):
        start = i * (s - overlap) + min(i, r)
        spans.append((start, start + s + (1 if i < r else 0)))
    return spans


def upstream_stride(length: int, tiles: int, overlap: int) -> int:
    """s - ov: how far each tile starts after the previous one (before the remainder); <= 0 is degenerate."""
    return (length + overlap * (tiles - 1)) // tiles - overlap


def upstream_weight_sum(length: int, tiles: int, overlap: int) -> list[float]:
    """Upstream's unnormalised blend weight per cell: ramps k/(ov+1) on inner ends, multiplied, summed."""
    acc = [0.0] * length
    ramp = [(k + 1) / (overlap + 1) for k in range(overlap)]
    for i, (start, end) in enumerate(upstream_spans(length, tiles, overlap)):
        w = [1.0] * (end - start)
        if i > 0:
            for k in range(overlap):
                w[k] *= ramp[k]
        if i < tiles - 1:
            for k in range(overlap):
                w[end - start - 1 - k] *= ramp[k]
        for cell in range(start, end):
            acc[cell] += w[cell - start]
    return acc


def pack_weight_sum(intervals: tuple[Interval, ...], length: int) -> torch.Tensor:
    """What the pack blends with: the fp32 windows of `intervals` summed over [0, length)."""
    acc = torch.zeros(length, dtype=torch.float32)
    for interval in intervals:
        acc[interval.slice] += window_1d(interval)
    return acc


def spans_of(intervals: tuple[Interval, ...]) -> list[tuple[int, int]]:
    return [(i.start, i.end) for i in intervals]


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


# --- split by size ---------------------------------------------------------------------------------------


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


# --- count split for a tile size (the tile-size config) --------------------------------------------------


def count_splits_within(length: int, size: int, min_overlap: int) -> list[tuple[int, int]]:
    """Every (tiles, overlap >= min_overlap) whose count split is accepted with no tile longer than `size`, by brute
    force over all counts: the accepted overlaps of a count are 0 .. max_valid_overlap (validity is monotone, see
    above) and a tile's length ceil((length + overlap (tiles - 1)) / tiles) only grows with the overlap."""
    found = []
    for tiles in range(1, length + 1):
        if tiles == 1:
            if length <= size:
                found.append((1, min_overlap))  # one tile: every overlap gives the same interval
            continue
        accepted = max_valid_overlap(length, tiles)
        for overlap in range(min_overlap, accepted + 1):
            if -(-(length + overlap * (tiles - 1)) // tiles) > size:
                break
            found.append((tiles, overlap))
    return found


size_configs = st.integers(1, 24).flatmap(
    lambda size: st.tuples(st.integers(1, 56), st.just(size), st.integers(0, (size - 1) // 2)))


@settings(max_examples=300, deadline=None)
@given(size_configs)
@example((18, 11, 5))
@example((68, 64, 5))
@example((120, 60, 5))
def test_a_tile_size_resolves_to_the_count_split_with_the_fewest_tiles_and_the_largest_overlap(layout):
    """The size config's intervals are exactly AxisTiling(n, ov)'s for the (n, ov) it reports; no tile exceeds the
    size, the overlap is at least the minimum and the windows sum to one. The (n, ov) is the brute-force best:
    fewest tiles, then largest overlap; where it is refused, no count split meets both bounds."""
    length, size, minimum = layout
    spec = AxisTileSize(size, minimum, overlap_is_minimum=True)
    feasible = count_splits_within(length, size, minimum)
    try:
        tiles, overlap = count_for_size(length, size, minimum, "width")
    except TilingError as refused:
        assert not feasible, f"{layout} refused ({refused}) although {feasible[:3]} split it"
        message = str(refused)
        assert message.startswith("width: "), f"the refusal does not name the axis: {message!r}"
        smaller = int(message.split("minimum overlap of at most ")[1].split()[0])
        larger = int(message.split("tiles of at least ")[1].split()[0])
        assert smaller < minimum and count_splits_within(length, size, smaller), f"{layout}: {message!r}"
        assert larger > size and count_splits_within(length, larger, minimum), f"{layout}: {message!r}"
        return
    best_tiles = min(n for n, _ in feasible)
    best_overlap = max(ov for n, ov in feasible if n == best_tiles)
    assert (tiles, overlap) == (best_tiles, best_overlap if best_tiles > 1 else minimum), (
        f"{layout}: reported ({tiles}, {overlap}), brute force finds ({best_tiles}, {best_overlap})")
    got = spec.intervals(length, "width")
    assert got == AxisTiling(tiles, overlap).intervals(length) == split_by_count(length, tiles, overlap), (
        f"{layout}: the size config's intervals {spans_of(got)} are not AxisTiling({tiles}, {overlap})'s")
    assert spec.counts(length) == AxisTiling(tiles, overlap)
    assert max(i.length for i in got) <= size, f"{layout}: a tile is longer than {size}: {spans_of(got)}"
    assert overlap >= minimum, f"{layout}: overlap {overlap} below the minimum {minimum}"
    error = (pack_weight_sum(got, length) - 1.0).abs().max().item()
    assert error <= TOL, f"{layout}: window sum is off by {error:.2e}"


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40).flatmap(lambda size: st.tuples(st.integers(size + 1, size + 100), st.just(size),
                                                         st.integers((size + 1) // 2, size + 5))))
def test_a_tile_size_that_cannot_hold_its_minimum_overlap_at_both_ends_is_refused(layout):
    length, size, minimum = layout
    with pytest.raises(TilingError, match=rf"^height: a tile of {size} cells cannot hold an overlap of {minimum}"):
        count_for_size(length, size, minimum, "height")


def test_18_cells_in_tiles_of_11_with_overlap_at_least_5_are_refused_naming_what_works():
    """The exact-overlap size split finds [0,8) [3,14) [9,18) (end tiles shorter); no count split does, so the
    count-equal size split is refused with the nearest settings that work."""
    with pytest.raises(TilingError, match=r"width: 18 latent cells cannot be cut into tiles of at most 11 cells "
                                          r"overlapping by at least 5 .*; use a minimum overlap of at most 4 or "
                                          r"tiles of at least 12 cells"):
        count_for_size(18, 11, 5, "width")


def test_a_4k_width_in_2048_px_tiles_is_two_tiles_overlapping_8_cells():
    assert count_for_size(120, 64, 5) == (2, 8), "3840 px (120 cells) in tiles of 64 cells: 2 tiles of 64"
    assert spans_of(AxisTileSize(64, 5, overlap_is_minimum=True).intervals(120)) == [(0, 64), (56, 120)]


def test_the_exact_overlap_tile_size_of_the_vae_decode_is_unchanged():
    got = AxisTileSize(11, 5).intervals(18)
    assert spans_of(got) == [(0, 8), (3, 14), (9, 18)], f"the decode's exact-overlap split changed: {spans_of(got)}"
    with pytest.raises(ValueError, match="no tile count"):
        AxisTileSize(11, 5).counts(18)
