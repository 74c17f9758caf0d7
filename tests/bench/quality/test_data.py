"""The synthetic latent videos: seeded, shaped like an LTXV latent, channels tied by one fixed mixing."""

from __future__ import annotations

import torch

from ltx_tdp.bench.quality import data
from ltx_tdp.bench.quality.config import LATENT_CHANNELS, DataConfig


def test_a_video_is_a_function_of_its_seed():
    cfg = DataConfig()
    a, b, c = data.video(cfg, 12, 20, 5), data.video(cfg, 12, 20, 5), data.video(cfg, 12, 20, 6)
    assert a.shape == (LATENT_CHANNELS, cfg.frames, 12, 20), a.shape
    assert torch.equal(a, b)
    assert float((a - c).abs().mean()) > 0.1, float((a - c).abs().mean())


def test_channels_are_a_fixed_mixing_of_few_sources():
    cfg = DataConfig()
    v = data.video(cfg, 16, 16, 3).reshape(LATENT_CHANNELS, -1)
    s = torch.linalg.svdvals(v)
    assert float(s[cfg.sources] / s[0]) < 1e-4, f"rank above {cfg.sources}: {s[: cfg.sources + 2].tolist()}"
    assert 0.3 < float(v.std()) < 3.0, float(v.std())


def test_objects_move_between_frames():
    cfg = DataConfig(frames=3)
    src = data.sources(cfg, 24, 24, 11)
    moved = float((src[3:-1, 1:] - src[3:-1, :-1]).abs().mean())
    assert moved > 0.01, f"object sources changed by {moved} between frames"


def test_a_large_frame_has_the_statistics_of_small_crops():
    cfg = DataConfig()
    small = torch.stack([data.video(cfg, 16, 16, 100 + i) for i in range(24)])
    large = torch.stack([data.video(cfg, 32, 32, 200 + i) for i in range(6)])
    ratio = float(large.std() / small.std())
    assert 0.8 < ratio < 1.25, f"std of 2S frames / std of S crops = {ratio:.3f}"
