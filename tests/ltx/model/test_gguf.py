"""TDP on a GGUF model (city96's ComfyUI-GGUF, read-only at ltx_tdp_devkit.paths.gguf_pack_dir(), imported by path,
never copied): a tiny real LTXV (ComfyUI's LTXVModel, seeded) written as .gguf by the `gguf` package with its 2-D
weights in Q8_0 or Q4_0, loaded by ComfyUI-GGUF's own UnetLoaderGGUF node in this process.

Invariants: the loaded model computes with GGML-quantized weights; TDP 1 x 1 is bit-identical to the unpatched
GGUF model; TDP 2 x 2 gives a finite latent of the input's shape, with and without a LoRA-like patch (which GGUF
keeps on the weight's `patches` and applies at each forward) that changes the result. ComfyUI-GGUF's loader
registers no `cached_patcher_init`, so core's MultiGPU CFG Split cannot copy its model; the pack's clone carries a
factory of its own (ltx.loader_factory), so after the pack's node tiles over 2 devices equal one device bit for bit
and LTX Sequence Parallel equals one device within its bound, LoRA included. Placed before the pack's node, core's
node still refuses with its own message (before any sampling).

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
from ltx_tdp_devkit.api_prompts import multigpu_split_node, tdp_node, tiling_node
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
    assert not getattr(model, "is_dynamic", lambda: False)(), "ComfyUI-GGUF's patcher loads with Dynamic VRAM"
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


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_comfyui_sizes_a_gguf_tdp_run_by_its_largest_tile_plus_the_packs_buffers(comfy, gguf, lora):
    """As for safetensors (tests/ltx/model/test_memory.py): `estimate_memory`, as the sampler asks it, is the
    largest tile's estimate on the unpatched GGUF model plus the pack's buffers, not the whole frame's."""
    from ltx_tdp_devkit.estimates import comfyui_estimate, pack_buffers, record_estimates, within_one_cell

    latent_shape, tile_shape = (1, 128, 2, 32, 32), (1, 128, 2, 17, 17)  # 2 x 2 tiles, overlap 2: [0, 17), [15, 32)
    source = with_lora(gguf("Q8_0")) if lora else gguf("Q8_0")
    model = tdp_2x2(source)
    seen = record_estimates(model)
    ksample(comfy, model, {"samples": randn(*latent_shape, seed=1)}, steps=1, cfg=3.0, positive=cond(1),
            negative=cond(2))
    width = tiny_gguf.CAPTION_CHANNELS
    tile, full = (comfyui_estimate(source, shape, width) for shape in (tile_shape, latent_shape))
    buffers = pack_buffers(2, torch.Size(latent_shape).numel(), torch.Size(tile_shape).numel())
    ((shape, asked, _minimum),) = seen
    assert within_one_cell(asked, tile, buffers, tile_shape), (
        f"ComfyUI was asked for {asked / 2**20:.2f} MiB (noise shape {shape}); the largest tile needs "
        f"{tile / 2**20:.2f} MiB, the pack's buffers {buffers / 2**20:.2f} MiB, the whole frame {full / 2**20:.2f}")
    assert asked < 0.75 * full, f"asked {asked / full:.2f} x the whole frame's estimate"


@pytest.fixture
def two_devices(comfy):
    from ltx_tdp_devkit.core_multigpu import SKIP_REASON, fake_devices, has_core_multigpu

    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    with fake_devices(2) as devices:
        yield devices


def _split_copy(split) -> object:
    """The other device's copy that MultiGPU CFG Split made of `split`."""
    (copy,) = split.get_additional_models_with_key("multigpu")
    return copy


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("qtype", tiny_gguf.QTYPES)
def test_tiles_over_two_devices_equal_one_device_bit_for_bit(comfy, gguf, two_devices, qtype, lora):
    """The pack's clone carries a loader factory (ltx.loader_factory), so core's MultiGPU CFG Split can copy a GGUF
    model: the other device's model is a new one whose weights stay GGML-quantized over the same bytes, and the
    tiles both devices run give the one-device latent bit for bit, with a LoRA too (applied by each device's own
    GGUF patcher)."""
    from ltx_tdp_devkit.core_multigpu import TileCalls, cfg_split

    model = with_lora(gguf(qtype)) if lora else gguf(qtype)
    latent, kw = {"samples": randn(*SHAPE, seed=4)}, dict(positive=cond(1), negative=cond(2))
    single = ksample(comfy, tdp_2x2(model), latent, **kw)
    calls = TileCalls()
    split = cfg_split(calls.on(tdp_2x2(model)), 2)
    copy = _split_copy(split)
    assert copy.model is not model.model and type(copy).__name__ == "GGUFModelPatcher", type(copy)
    assert tiny_gguf.ggml_layers(copy.model) == tiny_gguf.ggml_layers(model.model)
    theirs = copy.model.diffusion_model.transformer_blocks[0].attn1.to_q.weight
    ours = model.model.diffusion_model.transformer_blocks[0].attn1.to_q.weight
    assert theirs is not ours and theirs.data_ptr() == ours.data_ptr(), "the copy's quantized weight is not shared"
    multi = ksample(comfy, split, latent, **kw)
    assert calls.models() == 2 and min(calls.counts()) > 0, f"tile calls per device: {calls.counts()}"
    assert torch.equal(multi, single), f"{qtype} {lora=}: 2 devices differ by {(multi - single).abs().max():.3e}"


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_sequence_parallel_over_two_devices_equals_one_device(comfy, gguf, two_devices, lora):
    """LTX Sequence Parallel over core's MultiGPU CFG Split on a Q8_0 GGUF model (with and without a LoRA) equals
    the unpatched model on one device within the sequence path's bound."""
    from ltx_tdp_devkit.core_multigpu import cfg_split
    from ltx_tdp_devkit.sequence import BOUND, relative_error, sequence

    model = with_lora(gguf("Q8_0")) if lora else gguf("Q8_0")
    latent, kw = {"samples": randn(*SHAPE, seed=4)}, dict(positive=cond(1), negative=cond(2), cfg=1.0)
    single = ksample(comfy, model, latent, **kw)
    multi = ksample(comfy, cfg_split(sequence(model), 2), latent, **kw)
    err = relative_error(multi, single)
    log.info("GGUF Q8_0 sequence parallel, lora %s: relative error %.3e", lora, err)
    assert err <= BOUND, f"{lora=}: 2 devices differ from one by {err:.3e} (relative), bound {BOUND}"


def test_multigpu_placed_before_the_pack_gets_cores_refusal(comfy, gguf, two_devices):
    """Outside the pack: MultiGPU CFG Split placed before the pack's node meets ComfyUI-GGUF's model without a
    loader factory and raises core's message at once (docs/works-with.md says to put it after the pack's node)."""
    from ltx_tdp_devkit.core_multigpu import cfg_split

    model = gguf("Q8_0")
    assert getattr(model, "cached_patcher_init", None) is None
    with pytest.raises(RuntimeError, match=REFUSAL) as refused:
        cfg_split(model, 2)
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


def _server_prompt(unet_name: str, split: str = "") -> dict:
    """UnetLoaderGGUF -> LTX TDP Tile Config (2 x 2, overlap 2) + Model Patcher -> KSampler (euler, 2 steps, cfg 1,
    seed 3) on EmptyLTXVLatentVideo 256 x 320 x 17 (latent 3 x 10 x 8) -> SaveLatent; `split` "after" puts MultiGPU
    CFG Split (2 GPUs) between the patcher and the sampler, "before" between the loader and the patcher."""
    prompt = {
        "unet": {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": unet_name}},
        "tiling": tiling_node(),
        "tdp": tdp_node("unet"),
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
    if split == "after":
        prompt["split"] = multigpu_split_node("tdp")
        prompt["sample"]["inputs"]["model"] = ["split", 0]
    elif split == "before":
        prompt["split"] = multigpu_split_node("unet")
        prompt["tdp"]["inputs"]["model"] = ["split", 0]
    from ltx_tdp_devkit.latent_outputs import add_latent_saves

    return add_latent_saves(prompt, {"out": ["sample", 0]}, folder=f"gguf_{split or 'one'}")


@pytest.mark.server
def test_a_gguf_model_runs_tdp_over_a_headless_server_as_in_process(comfy, gguf, gguf_server):
    """Over `POST /prompt` (ComfyUI-GGUF loaded by ComfyUI as a custom node) the 2 x 2 TDP result equals the
    same run in this process within 1e-5 of its largest value (another process, other torch threads)."""
    from ltx_tdp_devkit.latent_outputs import saved_latents

    server, name = gguf_server
    prompt = _server_prompt(name)
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
def test_the_server_spreads_a_gguf_models_tiles_over_two_devices_after_the_pack_and_refuses_them_before(
        comfy, gguf_server):
    """MultiGPU CFG Split after the pack's node (the documented order) gives the one-device latent bit for bit;
    placed before it, core's node meets ComfyUI-GGUF's model without a loader factory and the prompt fails with
    core's message, no hang, and the server runs the next prompt."""
    from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu
    from ltx_tdp_devkit.latent_outputs import saved_latents
    from ltx_tdp_devkit.server import PromptFailed

    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    server, name = gguf_server
    with pytest.raises(PromptFailed) as failed:  # first: core's node reuses a device copy an earlier run loaded
        server.run(_server_prompt(name, "before"), timeout=300)
    message = str(failed.value)
    log.info("GGUF server, MultiGPU before the pack: %s", message)
    assert "MultiGPU_WorkUnits" in message and REFUSAL in message, message
    got = {}
    for split in ("", "after"):
        prompt = _server_prompt(name, split)
        got[split] = saved_latents(server.base_dir, server.run(prompt, timeout=300), prompt)["out"]
    assert torch.equal(got["after"], got[""]), f"2 devices differ by {(got['after'] - got['']).abs().max():.3e}"
