"""Core's EasyCache and LazyCache nodes with the pack, over `POST /prompt` on a headless ComfyUI 0.33 that reports two
devices: one prompt samples the same latent with the cache on the untiled model, on the TDP patcher (2 x 2 tiles),
on the patcher over MultiGPU CFG Split and on LTX Sequence Parallel over MultiGPU CFG Split. On the tokenwise tiny
LTXV (attention output projections zeroed: tiling changes nothing, `ltx_tdp_devkit.step_caches`), every path gives
the untiled cached run's latent within fp32 rounding, and every cached sampler logs the same skipped steps.

HARDWARE MOCK: the server starts with LTX_TDP_TEST_FAKE_DEVICES=2 (the session's `two_device_server`): the test node
pack makes ComfyUI report cpu and cpu:1; the cache nodes, MultiGPU CFG Split, its thread pool and the pack are real.
Skips where ComfyUI has no in-process MultiGPU (0.3.75) or no cache node.
"""

from __future__ import annotations

import itertools
import re

import pytest

from ltx_tdp_devkit.api_prompts import multigpu_split_node, tdp_node, tiling_node
from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.step_caches import CACHES, THRESHOLD, TOKENWISE_LTXV, tokenwise_ltxv

pytestmark = pytest.mark.server

BOUND = 1e-5
"""Each path against the untiled cached run, relative to its latent's max |value| (tests/ltx/model/test_step_cache.py:
the blend's fp32 rounding, about 1e-7; the sequence path's bound is 2e-6)."""
PATHS = ("tdp", "tdp_two_devices", "sequence_two_devices")
_seeds = itertools.count(900)


def _prompt(kind: str, seed: int, folder: str) -> dict:
    def sampler(model: str) -> dict:
        return {"class_type": "KSampler",
                "inputs": {"model": [model, 0], "seed": seed, "steps": 10, "cfg": 1.0, "sampler_name": "euler",
                           "scheduler": "simple", "positive": ["positive", 0], "negative": ["negative", 0],
                           "latent_image": ["empty", 0], "denoise": 1.0}}

    prompt = {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": TOKENWISE_LTXV, "weight_dtype": "default"}},
        "positive": {"class_type": "TDPTestRandomConditioning", "inputs": {"seed": seed + 1, "tokens": 8, "dim": 16}},
        "negative": {"class_type": "TDPTestRandomConditioning", "inputs": {"seed": seed + 2, "tokens": 8, "dim": 16}},
        "empty": {"class_type": "EmptyLTXVLatentVideo",
                  "inputs": {"width": 320, "height": 256, "length": 17, "batch_size": 1}},
        "cache": {"class_type": kind, "inputs": {"model": ["unet", 0], "reuse_threshold": THRESHOLD,
                                                  "start_percent": 0.15, "end_percent": 0.95, "verbose": False}},
        "tiling": tiling_node(),
        "tdp": tdp_node("cache"),
        "tdp_split": multigpu_split_node("tdp"),
        "sequence": {"class_type": "LTXTDPSequenceParallel", "inputs": {"model": ["cache", 0]}},
        "sequence_split": multigpu_split_node("sequence"),
        "sample_untiled": sampler("cache"),
        "sample_tdp": sampler("tdp"),
        "sample_tdp_two_devices": sampler("tdp_split"),
        "sample_sequence_two_devices": sampler("sequence_split"),
        "sample_uncached": sampler("unet"),
    }
    names = ("untiled", *PATHS, "uncached")
    return add_latent_saves(prompt, {name: [f"sample_{name}", 0] for name in names}, folder=folder)


@pytest.mark.parametrize("kind", CACHES)
def test_every_path_with_a_step_cache_gives_the_untiled_cached_result_through_the_server(
        two_device_server, comfy, comfy_base, kind):
    if kind not in __import__("nodes").NODE_CLASS_MAPPINGS:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {kind} node")
    tokenwise_ltxv(comfy, comfy_base)  # writes the model file the server loads
    seed = next(_seeds)
    prompt = _prompt(kind, seed, folder=f"step_cache_{kind}_{seed}")
    skipped_before = len(re.findall(rf"{kind} - skipped", two_device_server.log_text()))
    entry = two_device_server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success", entry["status"]
    latents = saved_latents(comfy_base, entry, prompt)
    untiled = latents["untiled"]
    scale = float(untiled.abs().max())
    for path in PATHS:
        err = float((latents[path] - untiled).abs().max()) / scale
        assert latents[path].shape == untiled.shape and err <= BOUND, (
            f"{kind} on {path} differs from {kind} untiled by {err:.3e} (relative), bound {BOUND}")
    change = float((latents["uncached"] - untiled).abs().max()) / scale
    assert change > 1e-3, f"{kind} changed nothing ({change:.1e}): the equalities above would hold without it"
    counts = re.findall(rf"{kind} - skipped (\d+)/(\d+) steps", two_device_server.log_text())[skipped_before:]
    assert len(counts) == 1 + len(PATHS), f"{len(counts)} cached samplers logged their skips: {counts}"
    assert len(set(counts)) == 1 and int(counts[0][0]) > 0, f"{kind} skipped different steps per path: {counts}"
