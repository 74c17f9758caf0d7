"""The whole quality benchmark at minimum size (SMOKE): train a few steps, refine with every method through
ComfyUI's samplers and the pack's nodes, measure and write the report."""

from __future__ import annotations

import torch

from ltx_tdp.bench.quality import data, report, sweep
from ltx_tdp.bench.quality.config import SMOKE
from ltx_tdp.bench.quality.methods import METHODS, Refiner
from ltx_tdp.bench.quality.model import conditioning, load_model


def _setup(trained) -> tuple[Refiner, torch.Tensor, torch.Tensor, tuple[float, ...]]:
    """The trained MODEL as a Refiner, the smoke video at 2S, its noise field and the default sigmas."""
    n = SMOKE.cells
    gt = data.video(SMOKE.train.data, n, n, SMOKE.video_seed)[None]
    refiner = Refiner(load_model(trained.checkpoint), conditioning(SMOKE.train.model))
    return refiner, gt, sweep.noise_for(SMOKE.video_seed, gt.shape), SMOKE.default.sigmas


def test_every_method_refines_to_a_finite_latent_of_the_input_shape(comfy, smoke_trained):
    refiner, gt, noise, sigmas = _setup(smoke_trained)
    case = SMOKE.default
    for method in METHODS:
        out, _ = refiner.refine(method, gt, noise, sigmas, case.tiles, case.overlap)
        assert out.shape == gt.shape, f"{method}: {tuple(out.shape)} != {tuple(gt.shape)}"
        assert torch.isfinite(out).all(), f"{method}: {int((~torch.isfinite(out)).sum())} non-finite values"
        change = float((out - gt).abs().mean())
        assert change > 0, f"{method} returned its input unchanged"


def test_tdp_with_one_tile_equals_the_untiled_refine(comfy, smoke_trained):
    refiner, gt, noise, sigmas = _setup(smoke_trained)
    full, _ = refiner.refine("full", gt, noise, sigmas, (1, 1), 0)
    tdp, _ = refiner.refine("tdp", gt, noise, sigmas, (1, 1), 0)
    assert torch.equal(tdp, full), f"max difference {float((tdp - full).abs().max())}"


def test_shifting_a_spatial_tile_s_positions_does_not_change_its_output(comfy, smoke_trained):
    """LTX's RoPE makes attention depend on position differences only: normalised and global positions
    give the same refine up to fp32 rounding (the quality benchmark's (b) and (c))."""
    refiner, gt, noise, sigmas = _setup(smoke_trained)
    normalised, _ = refiner.refine("tdp", gt, noise, sigmas, (2, 2), 2)
    global_positions, _ = refiner.refine("tdp_global_pos", gt, noise, sigmas, (2, 2), 2)
    diff = float((normalised - global_positions).abs().max())
    assert diff < 1e-4, f"normalised and global positions differ by {diff:.3e}"


def test_per_step_blend_without_overlap_equals_tiles_refined_alone(comfy, smoke_trained):
    """Without overlap every cell belongs to one tile and euler updates cell by cell: (b) at overlap 0 is (e)."""
    refiner, gt, noise, sigmas = _setup(smoke_trained)
    tdp, _ = refiner.refine("tdp", gt, noise, sigmas, (2, 2), 0)
    alone, drift = refiner.refine("no_overlap", gt, noise, sigmas, (2, 2), 0)
    diff = float((tdp - alone).abs().max())
    assert diff < 1e-5 and drift == 0.0, f"max difference {diff}, drift {drift}"


def test_the_whole_benchmark_runs_and_writes_its_report(comfy, smoke_trained, tmp_path):
    results = sweep.run(SMOKE, smoke_trained, progress=False)
    expected = len(SMOKE.cases()) * len(METHODS) * SMOKE.videos
    assert len(results.rows) == expected, f"{len(results.rows)} rows, expected {expected}"
    bad = [r for r in results.rows if not (r.psnr == r.psnr and r.seam == r.seam)]
    assert not bad, bad[:3]
    report.write(SMOKE, smoke_trained, results, tmp_path, "test")
    text = (tmp_path / "quality.md").read_text()
    assert "### Default case" in text and "(b) TDP, per-step blend" in text, text[:500]
    for name in ("quality.json", *report.FIGURES):
        assert (tmp_path / name).stat().st_size > 0, name
