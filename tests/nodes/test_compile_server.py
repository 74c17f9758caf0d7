"""Core's ModelAttentionBackend and TorchCompileModel (inductor) stacked before the pack's nodes, over `POST /prompt`
on a headless ComfyUI 0.33 that reports two devices: one prompt samples the tiny LTXV with the TDP patcher (2 x 2
tiles), the patcher over MultiGPU CFG Split and LTX Sequence Parallel over MultiGPU CFG Split, compiled with the
backend set, and the same untiled and TDP paths eager. Each compiled path equals its eager counterpart within
1e-4 of the latent's max (inductor reorders fp32 ops; the in-process tests bound the same): TDP compiled the eager
TDP result on one and two devices, sequence parallel the eager untiled result.

The recompile and graph-break counts are asserted in process (tests/ltx/model/test_torch_compile.py,
tests/ltx/sequence/test_sequence_compile.py), where Dynamo's counters can be read; here the real nodes run in a
real server.

HARDWARE MOCK: the server starts with LTX_TDP_TEST_FAKE_DEVICES=2 (the session's `two_device_server`): the test node
pack makes ComfyUI report cpu and cpu:1; the core nodes, MultiGPU CFG Split, its thread pool and the pack are real.
Skips where ComfyUI has no in-process MultiGPU (0.3.75) or no ModelAttentionBackend / TorchCompileModel node.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.api_prompts import multigpu_split_node, tdp_node, tiling_node
from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents

pytestmark = pytest.mark.server

ROUNDING = 1e-4
"""A compiled path against its eager counterpart, relative to the eager latent's max |value|."""
COMPILED = {"tdp_compiled": "tdp_eager", "tdp_two_devices_compiled": "tdp_eager",
            "sequence_two_devices_compiled": "untiled_eager"}
"""Each compiled path and the eager run it must equal."""


def _prompt(model_file: str, folder: str) -> dict:
    def sampler(model: str) -> dict:
        return {"class_type": "KSampler",
                "inputs": {"model": [model, 0], "seed": 7, "steps": 3, "cfg": 1.0, "sampler_name": "euler",
                           "scheduler": "simple", "positive": ["positive", 0], "negative": ["negative", 0],
                           "latent_image": ["empty", 0], "denoise": 1.0}}

    prompt = {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": model_file, "weight_dtype": "default"}},
        "positive": {"class_type": "TDPTestRandomConditioning", "inputs": {"seed": 8, "tokens": 8, "dim": 16}},
        "negative": {"class_type": "TDPTestRandomConditioning", "inputs": {"seed": 9, "tokens": 8, "dim": 16}},
        "empty": {"class_type": "EmptyLTXVLatentVideo",
                  "inputs": {"width": 320, "height": 256, "length": 17, "batch_size": 1}},
        "backend": {"class_type": "ModelAttentionBackend",
                    "inputs": {"model": ["unet", 0], "attention": "pytorch attention"}},
        "compiled": {"class_type": "TorchCompileModel", "inputs": {"model": ["backend", 0], "backend": "inductor"}},
        "tiling": tiling_node(),
        "tdp": tdp_node("unet"),
        "tdp_on_compiled": tdp_node("compiled"),
        "tdp_split": multigpu_split_node("tdp_on_compiled"),
        "sequence": {"class_type": "LTXTDPSequenceParallel", "inputs": {"model": ["compiled", 0]}},
        "sequence_split": multigpu_split_node("sequence"),
        "sample_untiled_eager": sampler("unet"),
        "sample_tdp_eager": sampler("tdp"),
        "sample_tdp_compiled": sampler("tdp_on_compiled"),
        "sample_tdp_two_devices_compiled": sampler("tdp_split"),
        "sample_sequence_two_devices_compiled": sampler("sequence_split"),
    }
    names = ("untiled_eager", "tdp_eager", *COMPILED)
    return add_latent_saves(prompt, {name: [f"sample_{name}", 0] for name in names}, folder=folder)


def test_compile_and_an_attention_backend_before_the_pack_give_the_eager_result_on_every_path(
        two_device_server, comfy, comfy_base, model_names):
    import nodes

    missing = [n for n in ("ModelAttentionBackend", "TorchCompileModel") if n not in nodes.NODE_CLASS_MAPPINGS]
    if missing:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {', '.join(missing)}")
    prompt = _prompt(model_names["ltxv"], folder="compile_server")
    entry = two_device_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    latents = saved_latents(comfy_base, entry, prompt)
    for path, eager in COMPILED.items():
        want = latents[eager]
        err = float((latents[path] - want).abs().max()) / float(want.abs().max())
        assert latents[path].shape == want.shape and err <= ROUNDING, (
            f"{path} differs from {eager} by {err:.3e} (relative), bound {ROUNDING}")
    change = float((latents["tdp_eager"] - latents["untiled_eager"]).abs().max())
    assert change > 0, "TDP changed nothing: the TDP comparisons would not tell the paths apart"
