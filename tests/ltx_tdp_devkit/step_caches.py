"""Core ComfyUI's step caches (EasyCache, LazyCache) as the tests put them on a model, and what a cached run did.

`cached(model, kind)` applies the real core node; `CachedRun` samples with KSampler and records, per sampler
step, the denoised latent the sampler gets (a post-CFG function, ComfyUI's public hook) and the number of steps
the cache skipped (the count the cache itself logs at the end of sampling, "<name> - skipped N/M steps").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .ltx_helpers import conditioning

CACHES = ("EasyCache", "LazyCache")
THRESHOLD = 1.0
"""reuse_threshold of the tests: high enough that the tiny model's 10-step runs skip steps (measured on the tokenwise
LTXV: EasyCache skips 2 of 10, LazyCache 4; at the default 0.2 neither skips any)."""
TOKENWISE_LTXV = "tdp_tiny_ltxv_tokenwise.safetensors"
_SKIPPED = re.compile(r"(EasyCache|LazyCache) - skipped (\d+)/(\d+) steps")


def tokenwise_ltxv(comfy: Any, comfy_base: Path) -> Any:
    """The tiny LTXV whose tokens are independent (tiny_models.build_tokenwise_ltxv), loaded by UNETLoader."""
    import folder_paths

    from .tiny_models import build_tokenwise_ltxv

    path = comfy_base / "models" / "diffusion_models" / TOKENWISE_LTXV
    if not path.exists():
        build_tokenwise_ltxv(path, seed=5)
        folder_paths.filename_list_cache.clear()
    (model,) = comfy.run_node("UNETLoader", unet_name=TOKENWISE_LTXV, weight_dtype="default")
    return model


def cached(comfy: Any, model: Any, kind: str, threshold: float = THRESHOLD) -> Any:
    """`model` with core's `kind` node (EasyCache or LazyCache) applied, start and end at the node's defaults."""
    (out,) = comfy.run_node(kind, model=model, reuse_threshold=threshold, start_percent=0.15, end_percent=0.95,
                            verbose=False)
    return out


class _SkipLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: list[tuple[str, int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _SKIPPED.search(record.getMessage())
        if match:
            self.counts.append((match.group(1), int(match.group(2)), int(match.group(3))))


@dataclass
class CachedRun:
    """One KSampler run: `final` latent, `steps` (the denoised latent of each step the sampler's CFG ran: a step
    LazyCache skips, around the whole prediction, has none), `skipped` (the cache's count)."""

    final: torch.Tensor
    steps: list[torch.Tensor] = field(default_factory=list)
    skipped: int | None = None

    def max_step_diff(self, other: "CachedRun") -> float:
        """The largest |difference| over every step's denoised latent, relative to the latents' max |value|."""
        assert len(self.steps) == len(other.steps), (len(self.steps), len(other.steps))
        scale = max(float(s.abs().max()) for s in other.steps)
        return max(float((a - b).abs().max()) for a, b in zip(self.steps, other.steps)) / scale


def sample(comfy: Any, model: Any, latent: torch.Tensor, steps: int = 10, cfg: float = 3.0,
           denoise: float = 1.0) -> CachedRun:
    """Sample `latent` with KSampler (euler, simple) on a clone of `model` that records every step's denoised."""
    return sample_latent(comfy, model, {"samples": latent}, steps, cfg, denoise)


def sample_latent(comfy: Any, model: Any, latent: dict, steps: int = 10, cfg: float = 3.0, denoise: float = 1.0,
                  positive: list | None = None, negative: list | None = None) -> CachedRun:
    """`sample` of a LATENT dict (e.g. LTX-2's packed video + audio), with the given conditioning."""
    recorded: list[torch.Tensor] = []

    def record(args: dict) -> torch.Tensor:
        recorded.append(args["denoised"].detach().clone())
        return args["denoised"]

    m = model.clone()
    m.set_model_sampler_post_cfg_function(record)
    log = _SkipLog()
    root = logging.getLogger()
    level = root.level
    root.addHandler(log)
    root.setLevel(min(level or logging.INFO, logging.INFO))
    try:
        (out,) = comfy.run_node("KSampler", model=m, seed=3, steps=steps, cfg=cfg, sampler_name="euler",
                                scheduler="simple", positive=positive or conditioning(1),
                                negative=negative or conditioning(2), latent_image=latent, denoise=denoise)
    finally:
        root.removeHandler(log)
        root.setLevel(level)
    skipped = log.counts[-1][1] if log.counts else None
    return CachedRun(out["samples"], recorded, skipped)
