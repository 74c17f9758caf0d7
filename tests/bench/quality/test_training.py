"""Training the benchmark's LTXV through ComfyUI's own model and model sampling: exact gradients, seeded,
cached, and it learns."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ltx_tdp.bench.quality import data
from ltx_tdp.bench.quality.config import SMOKE
from ltx_tdp.bench.quality.model import FRAME_RATE, context, load_model
from ltx_tdp.bench.quality.train import training_forward, train, trivial_mses


def test_training_is_seeded_and_cached(comfy, smoke_trained, tmp_path):
    from safetensors.torch import load_file

    again = train(SMOKE.train, tmp_path / "other", progress=False)
    assert not again.from_cache and again.losses == smoke_trained.losses, (again.losses, smoke_trained.losses)
    a, b = load_file(str(smoke_trained.checkpoint)), load_file(str(again.checkpoint))
    diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert diff == 0.0, f"two trainings with one config differ by {diff}"
    cached = train(SMOKE.train, smoke_trained.checkpoint.parent.parent, progress=False)
    assert cached.from_cache and cached.checkpoint == smoke_trained.checkpoint, cached


def test_a_different_config_is_a_different_cache_entry():
    other = dataclasses.replace(SMOKE.train, steps=SMOKE.train.steps + 1)
    check_only = dataclasses.replace(SMOKE.train, threads=SMOKE.train.threads + 1, holdout_videos=5,
                                     holdout_sigmas=(0.5,))
    assert other.key() != SMOKE.train.key()
    assert check_only.key() == SMOKE.train.key(), "threads and the held-out check do not change the weights"


def test_gradient_through_comfyui_blocks_matches_a_finite_difference(comfy, smoke_trained):
    """ComfyUI's LTX blocks add residuals in place and call fused kernels; in a training forward the gradient is
    still the true one."""
    model = load_model(smoke_trained.checkpoint)
    base = model.model
    net = base.diffusion_model
    cfg = SMOKE.train
    x0 = data.batch(cfg.data, 2, 5, 6, seed=3)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(x0.shape, generator=gen)
    sigma = torch.tensor([0.3, 0.7])
    x_t = base.model_sampling.noise_scaling(sigma, noise, x0)
    ctx, mask = context(cfg.model, 2)
    params = [p for p in net.parameters()]

    def loss_fn() -> torch.Tensor:
        with training_forward():
            out = base.apply_model(x_t, sigma, c_crossattn=ctx, attention_mask=mask, frame_rate=FRAME_RATE)
        return ((out - x0) ** 2).mean()

    try:
        for p in params:
            p.requires_grad_(True)
        loss = loss_fn()
        grads = torch.autograd.grad(loss, params)
        direction = [torch.randn(p.shape, generator=gen) for p in params]
        analytic = sum(float((g * d).sum()) for g, d in zip(grads, direction))
        eps = 1e-3
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(eps * d)
            plus = float(loss_fn())
            for p, d in zip(params, direction):
                p.sub_(2 * eps * d)
            minus = float(loss_fn())
            for p, d in zip(params, direction):
                p.add_(eps * d)
    finally:
        for p in params:
            p.requires_grad_(False)
    numeric = (plus - minus) / (2 * eps)
    assert numeric == pytest.approx(analytic, rel=0.02), f"autograd {analytic:.6f}, central difference {numeric:.6f}"


def test_training_lowers_the_velocity_loss(comfy, tmp_path):
    cfg = dataclasses.replace(SMOKE.train, steps=60, warmup=5, lr=3e-3)
    trained = train(cfg, tmp_path, progress=False)
    first, last = sum(trained.losses[:10]) / 10, sum(trained.losses[-10:]) / 10
    assert last < 0.8 * first, f"mean loss of the first 10 steps {first:.4f}, of the last 10 {last:.4f}"


def test_trivial_predictors_are_what_they_say():
    x0 = torch.randn(2, 4, 3, 5, generator=torch.Generator().manual_seed(1))
    exact = trivial_mses(x0, x0)
    assert exact["input"] == 0.0 and exact["scaled input"] == pytest.approx(0.0, abs=1e-12), exact
    doubled = trivial_mses(2 * x0, x0)
    assert doubled["scaled input"] == pytest.approx(0.0, abs=1e-10), doubled
    assert doubled["input"] == pytest.approx(float((x0 ** 2).mean())) == doubled["zero"], doubled
