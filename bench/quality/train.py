"""Rectified-flow training of the benchmark's LTXV, through ComfyUI's own model and model sampling, cached.

One step: crops of h x w cells (each in [min_crop, S], positions starting at 0, as LTX-2 is trained up
to its position range), sigma uniform in [sigma_min, 1], x_t = ComfyUI's `noise_scaling` (sigma * noise +
(1 - sigma) * x0), the model called through `BaseModel.apply_model`, and the loss on the velocity
noise - x0 (ComfyUI's CONST parameterisation: x0 = x_t - sigma * v). Everything is seeded; the result is
cached under `<cache>/<TrainConfig.key()>/` and reused while the config is the same.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from . import data
from .config import TrainConfig
from .model import FRAME_RATE, context, init_state_dict, load_model, save_checkpoint

log = logging.getLogger("ltx_tdp.bench.quality")

HOLDOUT_SEED = 1_000_000
"""Held-out videos are seeded from here on; training batches use seeds 1..steps."""


@dataclass(frozen=True)
class Trained:
    """A trained model on disk: its checkpoint, its loss curve and its held-out check."""

    checkpoint: Path
    losses: tuple[float, ...]
    holdout: tuple[dict, ...]
    seconds: float
    from_cache: bool


def train(cfg: TrainConfig, cache: Path, progress: bool = True) -> Trained:
    """The model trained with `cfg`: from `cache` if it is there, else trained now and stored there.

    Invariant: the same config gives the same weights (seeded data, noise, sigmas and initialisation).
    """
    folder = cache / cfg.key()
    checkpoint = folder / f"ltxv_quality_{cfg.key()}.safetensors"
    record = folder / "train.json"
    if checkpoint.is_file() and record.is_file():
        info = json.loads(record.read_text())
        log.info("trained model from the cache: %s", checkpoint)
        return Trained(checkpoint, tuple(info["losses"]), tuple(info["holdout"]), info["seconds"], True)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)  # the same arithmetic on every machine; the caller's count comes back
    try:
        start = time.time()
        init = folder / f"ltxv_quality_{cfg.key()}_init.safetensors"
        save_checkpoint(init_state_dict(cfg.model, cfg.seed), init, cfg.model)
        model = load_model(init)
        losses = _fit(cfg, model, progress)
        seconds = time.time() - start
        holdout = holdout_check(cfg, model)
    finally:
        torch.set_num_threads(threads)
    save_checkpoint(model.model.diffusion_model.state_dict(), checkpoint, cfg.model)
    init.unlink()
    record.write_text(json.dumps({"config": asdict(cfg), "losses": losses, "holdout": holdout,
                                  "seconds": seconds}, indent=1))
    return Trained(checkpoint, tuple(losses), tuple(holdout), seconds, False)


@contextlib.contextmanager
def training_forward() -> Iterator[None]:
    """A forward pass whose gradient is exact through ComfyUI's LTX blocks.

    * Autograd keeps a copy of every tensor it saves for the backward pass: ComfyUI's LTX blocks are written
      for inference and add their residuals in place (`x += ...`) into tensors an earlier operation saved
      for its gradient. Copies taken when a tensor is saved hold the value the forward pass used.
    * ComfyUI's own training switch (`comfy.model_management.in_training`, which its LoRA trainer sets, on
      ComfyUI 0.33 and later) is on: its inference paths call fused comfy-kitchen kernels (RoPE, RMS norm
      + AdaLN) that have no backward, and the switch selects the plain torch code instead.

    ComfyUI's code is left as it is; the switch is restored afterwards.
    """
    import comfy.model_management as mm

    had_switch = hasattr(mm, "in_training")
    before = getattr(mm, "in_training", False)
    if had_switch:
        mm.in_training = True
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            yield
    finally:
        if had_switch:
            mm.in_training = before


def _lr(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _fit(cfg: TrainConfig, model_patcher: Any, progress: bool) -> list[float]:
    """Train the diffusion model inside `model_patcher` in place; the loss of every step."""
    from tqdm import tqdm

    base = model_patcher.model
    net = base.diffusion_model
    net.train()
    for p in net.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    ctx, mask = context(cfg.model, cfg.batch)
    losses = []
    bar = tqdm(range(cfg.steps), desc="training", disable=not progress, mininterval=2.0)
    for step in bar:
        h, w = (int(v) for v in torch.randint(cfg.min_crop, cfg.model.max_cells + 1, (2,), generator=gen))
        x0 = data.batch(cfg.data, cfg.batch, h, w, seed=step + 1)
        sigma = cfg.sigma_min + (1 - cfg.sigma_min) * torch.rand(cfg.batch, generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        x_t = base.model_sampling.noise_scaling(sigma, noise, x0)
        with training_forward():
            denoised = base.apply_model(x_t, sigma, c_crossattn=ctx, attention_mask=mask, frame_rate=FRAME_RATE)
        v_pred = (x_t - denoised) / sigma.view(-1, 1, 1, 1, 1)
        loss = torch.nn.functional.mse_loss(v_pred, noise - x0)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.4f}", crop=f"{h}x{w}")
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return losses


def trivial_mses(x_t: torch.Tensor, x0: torch.Tensor) -> dict[str, float]:
    """MSE of the trivial x0 predictors: the data mean (0), the noisy input itself, and the best single
    scale of the noisy input (fitted on these very videos, so it is the strongest of its kind)."""
    scale = float((x_t * x0).sum() / (x_t * x_t).sum())
    return {
        "zero": float((x0 ** 2).mean()),
        "input": float(((x_t - x0) ** 2).mean()),
        "scaled input": float(((scale * x_t - x0) ** 2).mean()),
    }


def holdout_check(cfg: TrainConfig, model_patcher: Any, cells: int | None = None) -> list[dict]:
    """Per sigma: the model's x0 MSE on held-out S x S videos (in range) and on 2S x 2S videos (full
    frame, out of range), against the trivial predictors' MSE on the same noisy S x S videos."""
    base = model_patcher.model
    out = []
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    s = cells or cfg.model.max_cells
    ctx, mask = context(cfg.model, 1)
    with torch.no_grad():
        for sigma in cfg.holdout_sigmas:
            row: dict[str, float] = {"sigma": sigma}
            for label, size in (("model", s), ("model at 2S", 2 * s)):
                errs, trivial = [], []
                for i in range(cfg.holdout_videos):
                    x0 = data.video(cfg.data, size, size, HOLDOUT_SEED + i)[None]
                    noise = torch.randn(x0.shape, generator=gen)
                    sig = torch.tensor([sigma])
                    x_t = base.model_sampling.noise_scaling(sig, noise, x0)
                    pred = base.apply_model(x_t, sig, c_crossattn=ctx, attention_mask=mask, frame_rate=FRAME_RATE)
                    errs.append(float(((pred - x0) ** 2).mean()))
                    if size == s:
                        trivial.append((x_t, x0))
                row[label] = sum(errs) / len(errs)
                if trivial:
                    row.update(trivial_mses(torch.cat([t for t, _ in trivial]), torch.cat([x for _, x in trivial])))
            out.append(row)
    return out
