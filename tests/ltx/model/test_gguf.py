"""TDP on a GGUF model (city96's ComfyUI-GGUF, read-only at ltx_tdp_devkit.paths.gguf_pack_dir(), imported by path,
never copied): a tiny real LTXV (ComfyUI's LTXVModel, seeded) written as .gguf by the `gguf` package with its 2-D
weights in Q8_0 or Q4_0, loaded by ComfyUI-GGUF's own UnetLoaderGGUF node in this process.

Invariants: the loaded model computes with GGML-quantized weights; TDP 1 x 1 is bit-identical to the unpatched
GGUF model; TDP 2 x 2 gives a finite latent of the input's shape, with and without a LoRA-like patch (which GGUF
keeps on the weight's `patches` and applies at each forward) that changes the result. MultiGPU CFG Split (ComfyUI's
own create_multigpu_deepclones) refuses a GGUF model with core's message: ComfyUI-GGUF's loader registers no
`cached_patcher_init`, so no copy for another device can be made; the test asserts the user gets that message
(before any sampling) for TDP tiles and for LTX Sequence Parallel.

HARDWARE MOCK: the MultiGPU tests make `comfy.model_management.get_all_torch_devices` report cpu and cpu:1
(ltx_tdp_devkit.core_multigpu.fake_devices); nothing else is mocked.

Skips: without a ComfyUI-GGUF checkout, or where it does not import (the reason names the ComfyUI version); the
MultiGPU tests where ComfyUI has no in-process MultiGPU (0.3.75).
"""

from __future__ import annotations

import logging

import pytest
import torch

from ltx_tdp_devkit import tiny_gguf
from ltx_tdp_devkit.ltx_helpers import call_model, ksample, patch, randn, tdp_2x2, tiling
from ltx_tdp_devkit.paths import gguf_pack_dir

SHAPE = (1, 128, 3, 8, 10)
log = logging.getLogger(__name__)
REFUSAL = "cached_patcher_init is not initialized"
"""Core's refusal (comfy/model_patcher.py ModelPatcher.deepclone_multigpu, ComfyUI 0.24 and 0.33)."""


def context(seed: int = 2) -> torch.Tensor:
    """Text features as wide as the GGUF model's captions (tiny_gguf.CAPTION_CHANNELS)."""
    return randn(1, 8, tiny_gguf.CAPTION_CHANNELS, seed=seed)


def cond(seed: int) -> list:
    return [[context(seed), {"attention_mask": torch.ones(1, 8, dtype=torch.long), "frame_rate": 25.0}]]


@pytest.fixture(scope="module")
def gguf(comfy):
    return tiny_gguf.gguf_loader(comfy)


with_lora = tiny_gguf.with_lora


@pytest.mark.parametrize("qtype", tiny_gguf.QTYPES)
def test_the_loaded_model_computes_with_ggml_quantized_weights(gguf, qtype):
    model = gguf(qtype)
    assert type(model).__name__ == "GGUFModelPatcher", type(model)
    layers = tiny_gguf.ggml_layers(model.model)
    blocks = [n for n in layers if ".transformer_blocks." in n]
    assert len(blocks) >= 10 * 2, f"{qtype}: only {len(blocks)} quantized block layers: {layers}"
    assert set(layers.values()) == {qtype}, layers
    weight = model.model.diffusion_model.transformer_blocks[0].attn1.to_q.weight
    assert weight.dtype == torch.uint8 and tuple(weight.tensor_shape) == (64, 64), (weight.dtype, weight.tensor_shape)


@pytest.mark.parametrize("qtype", tiny_gguf.QTYPES)
def test_one_by_one_tiling_is_bit_identical_to_the_unpatched_gguf_model(comfy, gguf, qtype):
    model = gguf(qtype)
    x = randn(*SHAPE, seed=1)
    plain = call_model(model, x, 0.6, c_crossattn=context())
    tiled = call_model(patch(model, tiling()), x, 0.6, c_crossattn=context())
    assert torch.isfinite(plain).all() and plain.abs().max() > 0
    assert torch.equal(tiled, plain), f"{qtype}: 1 x 1 differs by {(tiled - plain).abs().max().item():.3e}"


@pytest.mark.parametrize("qtype", tiny_gguf.QTYPES)
def test_two_by_two_tiles_sample_a_finite_latent_with_and_without_a_lora(comfy, gguf, qtype):
    model = gguf(qtype)
    latent = {"samples": randn(*SHAPE, seed=4)}
    kw = dict(positive=cond(1), negative=cond(2))
    plain = ksample(comfy, tdp_2x2(model), latent, **kw)
    lora = ksample(comfy, tdp_2x2(with_lora(model)), latent, **kw)
    for out in (plain, lora):
        assert tuple(out.shape) == SHAPE and torch.isfinite(out).all(), (out.shape, out.isfinite().all())
    effect = (lora - plain).abs().max().item()
    log.info("GGUF %s 2x2: max |x| %.4f, LoRA effect %.3e", qtype, plain.abs().max().item(), effect)
    assert effect > 1e-3, f"{qtype}: the LoRA changed the 2 x 2 result by only {effect:.3e}"
    untiled_lora = ksample(comfy, with_lora(model), latent, **kw)
    one_tile = ksample(comfy, patch(with_lora(model), tiling()), latent, **kw)
    assert torch.equal(one_tile, untiled_lora), f"{qtype} + LoRA: 1 x 1 differs from the unpatched model"


@pytest.fixture
def two_devices(comfy):
    from ltx_tdp_devkit.core_multigpu import SKIP_REASON, fake_devices, has_core_multigpu

    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    with fake_devices(2) as devices:
        yield devices


@pytest.mark.parametrize("path", ["tdp_tiles", "sequence_parallel"])
def test_multigpu_cfg_split_refuses_a_gguf_model_with_cores_message(comfy, gguf, two_devices, path):
    """Blocked outside the pack: ComfyUI-GGUF's UnetLoaderGGUF sets no `cached_patcher_init`, so core's
    create_multigpu_deepclones cannot make the other device's copy; the user gets core's RuntimeError at once."""
    from ltx_tdp_devkit.core_multigpu import cfg_split
    from ltx_tdp_devkit.sequence import sequence

    model = gguf("Q8_0")
    assert getattr(model, "cached_patcher_init", None) is None
    prepared = tdp_2x2(model) if path == "tdp_tiles" else sequence(model)
    with pytest.raises(RuntimeError, match=REFUSAL) as refused:
        cfg_split(prepared, 2)
    message = str(refused.value)
    assert "Cannot create multigpu deepclone of LTXV" in message and "custom loader" in message, message


GGUF_DIR_NAME = "ComfyUI-GGUF"
"""The folder name of the ComfyUI-GGUF link in the server's custom_nodes (a symlink to the read-only checkout)."""


@pytest.fixture(scope="module")
def gguf_server(comfy, comfy_dir, gguf, tmp_path_factory):
    """(server, model file name): a headless ComfyUI of its own whose custom_nodes hold this pack, the test node
    pack and a symlink to ComfyUI-GGUF, with the tiny Q8_0 GGUF LTXV in its diffusion-model folder. HARDWARE MOCK:
    LTX_TDP_TEST_FAKE_DEVICES=2 makes it report cpu and cpu:1 (ltx_tdp_devkit.core_multigpu)."""
    import sys

    from ltx_tdp_devkit.core_multigpu import FAKE_DEVICES_ENV
    from ltx_tdp_devkit.paths import PACK_ROOT, TEST_NODE_PACK
    from ltx_tdp_devkit.server import PACK_DIR_NAME, TEST_PACK_DIR_NAME, ComfyServer, prepare_base_dir

    base = tmp_path_factory.mktemp("gguf_base")
    name = "tdp_tiny_ltxv_Q8_0_server.gguf"
    tiny_gguf.build_gguf_ltxv(base / "models" / "diffusion_models" / name, "Q8_0")
    prepare_base_dir(base, PACK_ROOT, TEST_NODE_PACK, {})
    (base / "custom_nodes" / GGUF_DIR_NAME).symlink_to(gguf_pack_dir(), target_is_directory=True)
    whitelist = ("--whitelist-custom-nodes", PACK_DIR_NAME, TEST_PACK_DIR_NAME, GGUF_DIR_NAME)
    with ComfyServer(comfy_dir=comfy_dir, base_dir=base, python=sys.executable, extra_args=whitelist,
                     env={FAKE_DEVICES_ENV: "2"}) as server:
        yield server, name


def _server_prompt(unet_name: str, split: bool) -> dict:
    """UnetLoaderGGUF -> LTX TDP Tile Config (2 x 2, overlap 2) + Model Patcher [-> MultiGPU CFG Split] -> KSampler
    (euler, 2 steps, cfg 1, seed 3) on EmptyLTXVLatentVideo 256 x 320 x 17 (latent 3 x 10 x 8) -> SaveLatent."""
    prompt = {
        "unet": {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": unet_name}},
        "tiling": {"class_type": "LTXTDPTileConfig",
                   "inputs": {"frames_tiles": 1, "frames_overlap": 0, "height_tiles": 2, "height_overlap": 2,
                              "width_tiles": 2, "width_overlap": 2}},
        "tdp": {"class_type": "LTXTDPModelPatcher",
                "inputs": {"model": ["unet", 0], "tiling": ["tiling", 0], "normalize_positions": True,
                           "audio_mode": "held"}},
        "pos": {"class_type": "TDPTestRandomConditioning",
                "inputs": {"seed": 1, "tokens": 8, "dim": tiny_gguf.CAPTION_CHANNELS}},
        "neg": {"class_type": "TDPTestRandomConditioning",
                "inputs": {"seed": 2, "tokens": 8, "dim": tiny_gguf.CAPTION_CHANNELS}},
        "latent": {"class_type": "EmptyLTXVLatentVideo",
                   "inputs": {"width": 256, "height": 320, "length": 17, "batch_size": 1}},
        "sample": {"class_type": "KSampler",
                   "inputs": {"model": ["tdp", 0], "seed": 3, "steps": 2, "cfg": 1.0, "sampler_name": "euler",
                              "scheduler": "simple", "positive": ["pos", 0], "negative": ["neg", 0],
                              "latent_image": ["latent", 0], "denoise": 1.0}},
    }
    if split:
        prompt["split"] = {"class_type": "MultiGPU_WorkUnits", "inputs": {"model": ["tdp", 0], "max_gpus": 2}}
        prompt["sample"]["inputs"]["model"] = ["split", 0]
    from ltx_tdp_devkit.latent_outputs import add_latent_saves

    return add_latent_saves(prompt, {"out": ["sample", 0]}, folder="gguf_split" if split else "gguf")


@pytest.mark.server
def test_a_gguf_model_runs_tdp_over_a_headless_server_as_in_process(comfy, gguf, gguf_server):
    """Over `POST /prompt` (ComfyUI-GGUF loaded by ComfyUI as a custom node) the 2 x 2 TDP result equals the
    same run in this process within 1e-5 of its largest value (another process, other torch threads)."""
    from ltx_tdp_devkit.latent_outputs import saved_latents

    server, name = gguf_server
    prompt = _server_prompt(name, split=False)
    entry = server.run(prompt, timeout=300)
    got = saved_latents(server.base_dir, entry, prompt)["out"]
    plain = [[c[0][0], {"attention_mask": c[0][1]["attention_mask"]}] for c in (cond(1), cond(2))]
    want = ksample(comfy, tdp_2x2(gguf("Q8_0")), {"samples": torch.zeros(1, 128, 3, 10, 8)}, denoise=1.0,
                   positive=[plain[0]], negative=[plain[1]])
    assert tuple(got.shape) == (1, 128, 3, 10, 8) and torch.isfinite(got).all(), got.shape
    err = ((got - want).abs().max() / want.abs().max()).item()
    log.info("GGUF server vs in-process: relative error %.3e", err)
    assert err <= 1e-5, f"the server's GGUF TDP run differs from in-process by {err:.3e} (relative)"


@pytest.mark.server
def test_the_server_refuses_multigpu_cfg_split_on_a_gguf_model_with_cores_message(comfy, gguf_server):
    """Blocked outside the pack (see the module docstring): the prompt fails with core's message, no hang, no
    picture, and the server runs the next prompt."""
    from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu
    from ltx_tdp_devkit.server import PromptFailed

    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    server, name = gguf_server
    with pytest.raises(PromptFailed) as failed:
        server.run(_server_prompt(name, split=True), timeout=300)
    message = str(failed.value)
    log.info("GGUF server refusal: %s", message)
    assert "MultiGPU_WorkUnits" in message and REFUSAL in message, message
    entry = server.run(_server_prompt(name, split=False), timeout=300)
    assert entry["status"]["status_str"] == "success", entry["status"]
