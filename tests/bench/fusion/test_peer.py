"""The rebuilt LTXV Tiled Fusion Sampler's tiles and weights (bench/fusion/peer.py), and its default on the bench
model (bench/fusion/config.py): pure torch."""

from __future__ import annotations

import math

import torch

from ltx_tdp.bench.fusion.config import FusionConfig, PeerTile
from ltx_tdp.bench.fusion.peer import gaussian_1d, layout_of, mixing, peer_starts


def test_the_peer_default_is_the_same_fraction_of_the_position_range_rounded_up():
    assert PeerTile.scaled(16) == PeerTile(height=5, width=8, overlap_h=3, overlap_w=4), PeerTile.scaled(16)
    # Real LTX: 2048 px = 64 cells of 32 px; the scaling gives back 576 x 1024 px and half of it as overlap.
    assert PeerTile.scaled(64) == PeerTile(height=18, width=32, overlap_h=9, overlap_w=16), PeerTile.scaled(64)
    assert FusionConfig().peer_tile == PeerTile.scaled(16)


def test_gaussian_weights_peak_in_the_middle_and_have_no_floor():
    w = gaussian_1d(8)
    assert torch.allclose(w, w.flip(0)), w
    edge = math.exp(-((0.5 - 0.5 / 8) ** 2) / (2 * 0.05))
    assert abs(float(w[0]) - edge) < 1e-6 and float(w[3]) > 0.96, w.tolist()


def test_peer_tiles_cover_the_axis_every_stride_with_the_last_at_the_edge():
    assert peer_starts(32, 8, 4) == (0, 4, 8, 12, 16, 20, 24)
    starts = peer_starts(32, 5, 3)
    assert len(starts) == 15 and starts[-1] == 27 and starts[-2] == 26, starts
    assert peer_starts(4, 5, 3) == (0,)
    for length in range(1, 40):
        for tile in range(1, 10):
            for overlap in range(0, tile):
                covered = torch.zeros(length, dtype=torch.bool)
                for s in peer_starts(length, tile, overlap):
                    covered[s:s + tile] = True
                assert covered.all(), (length, tile, overlap)


def test_the_merge_is_a_convex_combination_everywhere():
    cfg = FusionConfig()
    for layout in (layout_of("peer", tile=cfg.peer_tile), layout_of("pack", tiles=(2, 2), overlap=5, window="gaussian")):
        total = torch.zeros(32, 32, dtype=torch.float64)
        for hs, ws, w in layout(32, 32):
            assert float(w.min()) > 0, "a weight of zero would drop a tile's cells"
            total[hs, ws] += w
        assert float(total.min()) > 0, "a cell without weight"


def test_mixing_is_the_share_of_independent_noise_the_merge_averages_away():
    one = layout_of("pack", tiles=(1, 1), overlap=0, window="trapezoid")(6, 6)
    assert float(mixing(one, 6, 6).abs().max()) == 0.0
    same = [(slice(0, 4), slice(0, 4), torch.ones(4, 4))] * 2
    assert torch.allclose(mixing(same, 4, 4), torch.full((4, 4), 0.5)), mixing(same, 4, 4)
    pack = mixing(layout_of("pack", tiles=(2, 2), overlap=5, window="trapezoid")(32, 32), 32, 32)
    assert float(pack[0, 0]) == 0.0 and float(pack[16, 16]) > 0.5, (float(pack[0, 0]), float(pack[16, 16]))
