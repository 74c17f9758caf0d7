"""The count split for a tile size with a minimum overlap (count_for_size, the tile-size config): the brute-force
best count split (fewest tiles, then the largest overlap), and a refusal naming the nearest settings that work."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import AxisTileSize, AxisTiling, TilingError, count_for_size, max_valid_overlap, split_by_count
from ltx_tdp_devkit.upstream_split import TOL, pack_weight_sum, spans_of


def count_splits_within(length: int, size: int, min_overlap: int) -> list[tuple[int, int]]:
    """Every (tiles, overlap >= min_overlap) whose count split is accepted with no tile longer than `size`, by brute
    force over all counts: the accepted overlaps of a count are 0 .. max_valid_overlap (validity is monotone,
    test_split_by_count.py) and a tile's length ceil((length + overlap (tiles - 1)) / tiles) only grows with the
    overlap."""
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
