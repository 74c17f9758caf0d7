"""Conditioning (guide) tokens: which tiles keep them, and the weight each keeping tile blends them with."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import conditioning_keep_mask, conditioning_weights

TILE = [(0, 8), (0, 64), (0, 64)]  # (time, height, width) [start, end) of one tile, in pixels


def tokens(*bounds):
    """(N, 3, 2) token bounds from per-token ((t0, t1), (y0, y1), (x0, x1))."""
    return torch.tensor(bounds, dtype=torch.float32)


def test_a_token_overlapping_the_tile_on_every_axis_is_kept():
    keep = conditioning_keep_mask(tokens(((2, 3), (10, 20), (30, 40))), TILE)
    assert keep.tolist() == [True], f"keep mask was {keep.tolist()}"


@pytest.mark.parametrize(
    ("missed_axis", "token"),
    [
        ("time", ((8, 9), (10, 20), (30, 40))),
        ("height", ((2, 3), (64, 96), (30, 40))),
        ("width", ((2, 3), (10, 20), (-32, 0))),
    ],
)
def test_a_token_overlapping_on_two_of_three_axes_is_dropped(missed_axis, token):
    keep = conditioning_keep_mask(tokens(token), TILE)
    assert keep.tolist() == [False], f"token outside the tile on {missed_axis} was kept"


def test_a_token_only_touching_the_tiles_end_is_dropped():
    """Bounds are half-open: a token starting where the tile ends does not overlap it."""
    keep = conditioning_keep_mask(tokens(((2, 3), (64, 65), (30, 40)), ((2, 3), (63, 65), (30, 40))), TILE)
    assert keep.tolist() == [False, True], f"keep mask was {keep.tolist()}"


def test_a_reference_token_with_negative_time_is_kept_by_every_tile():
    far_away = tokens(((-1, 0), (1000, 1010), (1000, 1010)))
    tiles = [[(0, 8), (0, 64), (0, 64)], [(8, 16), (64, 128), (0, 64)], [(0, 8), (0, 64), (64, 128)]]
    kept = [conditioning_keep_mask(far_away, tile).item() for tile in tiles]
    assert kept == [True, True, True], f"reference token kept by tiles: {kept}"


def test_token_bounds_must_be_n_by_axes_by_two():
    with pytest.raises(ValueError, match="token_bounds"):
        conditioning_keep_mask(torch.zeros(4, 3), TILE)


def test_each_keeping_tile_blends_a_token_with_one_over_the_number_of_keepers():
    masks = torch.tensor(
        [
            [True, True, True, False],
            [True, True, False, False],
            [True, False, False, False],
        ]
    )  # (tiles, tokens): token 0 kept by 3 tiles, 1 by 2, 2 by 1, 3 by none
    got = conditioning_weights(masks)
    want = torch.tensor([[1 / 3, 1 / 2, 1, 0], [1 / 3, 1 / 2, 0, 0], [1 / 3, 0, 0, 0]])
    assert got.dtype == torch.float32, f"weights dtype is {got.dtype}"
    assert torch.allclose(got, want, rtol=0, atol=1e-7), f"weights were {got.tolist()}"


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 9), st.integers(1, 40), st.integers(0, 2**31 - 1))
def test_a_kept_tokens_weights_sum_to_one_and_a_token_kept_by_nobody_weighs_zero(tiles, n_tokens, seed):
    masks = torch.rand(tiles, n_tokens, generator=torch.Generator().manual_seed(seed)) < 0.4
    weights = conditioning_weights(masks)
    column_sums = weights.sum(dim=0)
    kept = masks.any(dim=0)
    error = (column_sums[kept] - 1).abs().max().item() if kept.any() else 0.0
    assert error <= 1e-6, f"a kept token's weights sum to 1 +- {error:.2e}"
    assert torch.count_nonzero(weights[:, ~kept]) == 0, "a token kept by no tile got a weight"
    assert torch.count_nonzero(weights[~masks]) == 0, "a tile that drops a token still weights it"
