"""The quality benchmark's figures: seam score, tile borders, border band, PSNR, tile drift, high-pass energy
(pure torch)."""

from __future__ import annotations

import math

import pytest
import torch

from ltx_tdp.bench.quality.methods import overlap_disagreement
from ltx_tdp.bench.quality.metrics import band_mask, border_positions, highpass_energy, psnr, seam_score
from ltx_tdp.tiling import AxisTiling, TileCountConfig, plan_tiles


def smooth_image(n: int = 32, channels: int = 4) -> torch.Tensor:
    """(C, 1, n, n): slow sinusoids, no edges anywhere."""
    y = torch.arange(n, dtype=torch.float32)[:, None]
    x = torch.arange(n, dtype=torch.float32)[None, :]
    return torch.stack([torch.sin(2 * math.pi * (x + 0.7 * y) / 29 + c) for c in range(channels)])[:, None]


def test_a_step_at_a_tile_border_gives_a_seam_score_above_one():
    img = smooth_image()
    img[..., :, 16:] += 0.5  # a visible seam at the width border e = 16
    score = seam_score(img, ((), (16,)))
    assert score > 2.0, f"a 0.5 step on a smooth image scored {score:.3f}"


def test_a_smooth_image_scores_about_one():
    score = seam_score(smooth_image(), ((16,), (16,)))
    assert abs(score - 1.0) < 0.05, f"a smooth image scored {score:.4f}"


def test_white_noise_scores_about_one():
    noise = torch.randn(16, 2, 64, 64, generator=torch.Generator().manual_seed(0))
    score = seam_score(noise, ((20, 40), (32,)))
    assert abs(score - 1.0) < 0.03, f"white noise scored {score:.4f}"


def test_a_seam_elsewhere_is_not_counted_as_a_border_seam():
    img = smooth_image()
    before = seam_score(img, ((), (16,)))
    img[..., :, 8:] += 0.5  # the step is at 8, the border at 16
    score = seam_score(img, ((), (16,)))
    assert score < before, f"a step away from the border raised the border's score from {before:.3f} to {score:.3f}"


def test_border_positions_are_the_inner_edges_of_the_pack_tiles():
    intervals = AxisTiling(2, 5).intervals(32)
    assert border_positions(32, 2, 5) == (intervals[1].start, intervals[0].end), (intervals, border_positions(32, 2, 5))
    assert border_positions(32, 2, 0) == (16,)
    assert border_positions(32, 1, 0) == ()
    assert len(border_positions(32, 3, 4)) == 4


def test_band_mask_covers_half_width_cells_each_side_of_every_edge():
    mask = band_mask((10, 12), ((5,), (3, 9)), 2)
    assert mask[:, 0].nonzero().flatten().tolist() == [3, 4, 5, 6], mask[:, 0]
    assert mask[0, :].nonzero().flatten().tolist() == [1, 2, 3, 4, 7, 8, 9, 10], mask[0, :]
    assert int(band_mask((10, 12), ((), (6,)), 1).sum()) == 20


def test_psnr_of_a_known_error_and_of_a_masked_region():
    ref = torch.zeros(1, 1, 4, 4)
    ref[..., 0, 0] = 2.0  # peak = 2
    out = ref.clone()
    out[..., 3, :] += 0.2  # MSE over all = 4 * 0.04 / 16 = 0.01
    assert psnr(out, ref) == pytest.approx(10 * math.log10(4 / 0.01), abs=1e-4), psnr(out, ref)
    top = torch.zeros(4, 4, dtype=torch.bool)
    top[:2] = True
    assert math.isinf(psnr(out, ref, top)), psnr(out, ref, top)
    assert math.isinf(psnr(ref, ref))


def test_tile_disagreement_is_the_rms_difference_on_shared_cells():
    tiling = TileCountConfig(AxisTiling(1, 0), AxisTiling(1, 0), AxisTiling(2, 4))
    plan = plan_tiles((1, 2, 12), tiling.axes, ("frames", "height", "width"))
    a, b = plan.tiles
    results = {a.index: torch.zeros(3, *a.shape), b.index: torch.full((3, *b.shape), 0.5)}
    assert overlap_disagreement(plan.tiles, results) == pytest.approx(0.5), overlap_disagreement(plan.tiles, results)
    no_overlap = plan_tiles((1, 2, 12), (AxisTiling(1), AxisTiling(1), AxisTiling(2, 0)), ("f", "h", "w"))
    res = {t.index: torch.randn(3, *t.shape) for t in no_overlap.tiles}
    assert overlap_disagreement(no_overlap.tiles, res) == 0.0


def test_highpass_energy_is_zero_on_smooth_ramps_and_counts_fine_texture():
    y, x = torch.meshgrid(torch.arange(10.0), torch.arange(12.0), indexing="ij")
    ramp = (0.3 * x - 0.7 * y)[None, None]
    inner = highpass_energy(ramp)[1:-1, 1:-1]
    assert float(inner.abs().max()) < 1e-10, f"a linear ramp has high-pass energy {float(inner.abs().max()):.2e}"
    checker = ((x + y) % 2 * 2 - 1)[None, None]  # +-1: 5 of a 3 x 3 neighbourhood share the centre's sign
    energy = highpass_energy(checker)[1:-1, 1:-1]
    assert torch.allclose(energy, torch.full_like(energy, (8 / 9) ** 2)), energy[0, :3]
    assert highpass_energy(torch.zeros(3, 2, 5, 7)).shape == (5, 7)
