"""Quantized checkpoints (ComfyUI's stored format, loaded by UNETLoader) over a 2-rank group equal one
process, with and without a LoRA, fully loaded and under ComfyUI's low-VRAM loading; the worker computes
with quantized layers; a worker that would compute a layer in another format fails with the layer named.

Formats: fp8 e4m3fn and int8-convrot (LTX-2.5's templates), mxfp8 and nvfp4; each where this ComfyUI's
comfy-kitchen has it (0.24.0 has no int8), all four computed by comfy-kitchen's eager CPU backend here.
"""

from __future__ import annotations

import json

import pytest
import torch

from ltx_tdp_devkit.comfy_runtime import comfyui_version

from ltx_tdp_devkit import tiny_quant
from ltx_tdp_devkit.external_workers import start_test_worker
from ltx_tdp_devkit.ltx_helpers import conditioning, ksample, randn, tdp_2x2
from ltx_tdp_devkit.server import free_port

pytestmark = pytest.mark.distributed

CONTEXT_DIM = 32
LAYERS = 3
"""Transformer blocks of the tiny models: every block's Linears must survive the transfer."""
LORA_KEY = "diffusion_model.transformer_blocks.1.ff.net.0.proj.weight"
KW = dict(denoise=0.4, positive=conditioning(1, dim=CONTEXT_DIM), negative=conditioning(2, dim=CONTEXT_DIM))


@pytest.fixture(scope="module")
def quantized(comfy):
    """fmt -> the tiny LTX-2 transformer with its blocks' Linears in `fmt`, loaded by UNETLoader."""
    from ltx_tdp_devkit.tiny_models import has_ltxav

    if not has_ltxav():
        pytest.skip(f"ComfyUI {comfyui_version()} has no LTX-2 (comfy.ldm.lightricks.av_model)")
    import folder_paths

    folder = folder_paths.get_folder_paths("diffusion_models")[0]
    models = {}

    def load(fmt: str):
        if fmt not in tiny_quant.available_formats():
            pytest.skip(f"ComfyUI {comfyui_version()}'s comfy-kitchen has no {fmt} format")
        if fmt not in models:
            name = f"tdp_tiny_ltxav_{fmt}.safetensors"
            tiny_quant.build_quantized_ltxav(__import__("pathlib").Path(folder) / name, fmt, num_layers=LAYERS)
            folder_paths.filename_list_cache.clear()
            (models[fmt],) = comfy.run_node("UNETLoader", unet_name=name, weight_dtype="default")
        return models[fmt]

    return load


@pytest.fixture(scope="module")
def probed_group(comfy_dir, group_factory, tmp_path_factory):
    """A 2-rank group whose rank 1 records what each Linear computes with (layout_probe_worker.py); yields
    (group, last_job_layouts())."""
    if not tiny_quant.available_formats():
        pytest.skip(f"ComfyUI {comfyui_version()} has no quantized checkpoints (comfy.quant_ops formats)")
    port, out = free_port(), tmp_path_factory.mktemp("probe") / "layouts.jsonl"
    worker = start_test_worker("layout_probe_worker.py", comfy_dir, port, 60, TDP_PROBE_OUT=str(out))
    try:
        group = group_factory(2, timeout_s=60, external_workers=True, port=port, address="127.0.0.1")
        yield group, lambda: json.loads(out.read_text().splitlines()[-1])
        group.shutdown()
        assert worker.wait(timeout=60) == 0, "the probed worker did not end cleanly"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def _lora(model):
    """A clone with a LoRA-like weight difference (ComfyUI's "diff" patch) on one quantized Linear."""
    patched = model.clone()
    shape = patched.model.diffusion_model.transformer_blocks[1].ff.net[0].proj.weight.shape
    patched.add_patches({LORA_KEY: (randn(*shape, seed=9) * 0.5,)}, 1.0)
    return patched


def _latent(comfy):
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 2, 8, 8, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    return latent


def _diff(a, b) -> float:
    """Max abs difference of two sampled LTX-2 latents (video and audio, a NestedTensor each)."""
    return max((x - y).abs().max().item() for x, y in zip(a.unbind(), b.unbind()))


@pytest.mark.parametrize("fmt", list(tiny_quant.FORMATS))
@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_a_quantized_model_over_2_ranks_equals_one_process(comfy, quantized, probed_group, fmt, lora):
    group, layouts = probed_group
    model = quantized(fmt)
    model = _lora(model) if lora else model
    rank0 = tiny_quant.quantized_layers(model.model)
    assert len(rank0) >= 6 * LAYERS, f"{fmt}: only {len(rank0)} quantized layers on rank 0"
    latent = _latent(comfy)
    single = ksample(comfy, tdp_2x2(model), latent, **KW)
    with tiny_quant.LayoutRecorder(model.model) as on_rank0:
        multi = ksample(comfy, tdp_2x2(model, group), latent, **KW)
    err = _diff(multi, single)
    assert err == 0.0, f"{fmt}{' + LoRA' if lora else ''}: 2 ranks differ from one process by {err:.3e} (bit for bit)"
    on_worker = layouts()
    quantized_ran = {k: v for k, v in on_worker.items() if v != "plain"}
    assert len(quantized_ran) >= 4 * LAYERS, f"{fmt}: the worker's forward used only {len(quantized_ran)} " \
        f"quantized layers ({on_worker})"
    assert on_worker == on_rank0, f"{fmt}: the worker computed with other layers than rank 0: " \
        f"{ {k: (on_rank0.get(k), v) for k, v in on_worker.items() if on_rank0.get(k) != v} }"
    if lora:
        unpatched = ksample(comfy, tdp_2x2(quantized(fmt), group), latent, **KW)
        assert _diff(multi, unpatched) > 1e-3, f"{fmt}: the LoRA did not change the 2-rank result"


def _call_low_vram(patcher, x: torch.Tensor, sigma: float) -> torch.Tensor:
    """One model call with `patcher` loaded the way ComfyUI loads a model that does not fit its VRAM (a
    1-byte budget: every layer patched on the fly). On a CPU ComfyUI always loads fully, so the test asks
    the patcher for the low-VRAM load directly (its public `patch_model(lowvram_model_memory=...)`)."""
    import comfy.model_management

    comfy.model_management.unload_all_models()
    patcher.patch_model(device_to=torch.device("cpu"), lowvram_model_memory=1)
    try:
        ctx = randn(1, 8, 16, seed=11)
        with torch.inference_mode():
            return patcher.model.apply_model(x, torch.full((1,), sigma), c_crossattn=ctx,
                                             transformer_options={"wrappers": patcher.wrappers},
                                             attention_mask=torch.ones(1, 8, dtype=torch.long), frame_rate=25.0)
    finally:
        patcher.unpatch_model()


@pytest.fixture(scope="module")
def quantized_ltxv(comfy):
    """fmt -> the tiny video-only LTX transformer, its blocks' Linears in `fmt`, loaded by UNETLoader."""
    import folder_paths
    from pathlib import Path

    folder, models = folder_paths.get_folder_paths("diffusion_models")[0], {}

    def load(fmt: str):
        if fmt not in tiny_quant.available_formats():
            pytest.skip(f"ComfyUI {comfyui_version()}'s comfy-kitchen has no {fmt} format")
        if fmt not in models:
            name = f"tdp_tiny_ltxv_{fmt}.safetensors"
            tiny_quant.build_quantized_ltxv(Path(folder) / name, fmt, num_layers=LAYERS)
            folder_paths.filename_list_cache.clear()
            (models[fmt],) = comfy.run_node("UNETLoader", unet_name=name, weight_dtype="default")
        return models[fmt]

    return load


@pytest.mark.parametrize("fmt", list(tiny_quant.FORMATS))
def test_a_lora_on_a_quantized_model_under_low_vram_loading_reaches_the_workers(quantized_ltxv, probed_group, fmt):
    """Low-VRAM loading patches on the fly: rank 0 computes the LoRA layer from its dequantized weight plus
    the patch, and the workers compute with that same weight; the other layers stay quantized."""
    group, layouts = probed_group
    model = quantized_ltxv(fmt)
    lora = model.clone()
    shape = lora.model.diffusion_model.transformer_blocks[1].ff.net[0].proj.weight.shape
    lora.add_patches({LORA_KEY: (randn(*shape, seed=9) * 0.5,)}, 1.0)
    x = randn(1, 128, 2, 8, 8, seed=3)
    single = _call_low_vram(tdp_2x2(lora), x, 0.6)
    unpatched = _call_low_vram(tdp_2x2(model, group), x, 0.6)
    multi = _call_low_vram(tdp_2x2(lora, group), x, 0.6)
    effect = (single - _call_low_vram(tdp_2x2(model), x, 0.6)).abs().max().item()
    assert effect > 1e-2, f"{fmt}: the LoRA changed the one-process result by only {effect:.3e}"
    err = (multi - single).abs().max().item()
    assert err == 0.0, f"{fmt} + LoRA, low VRAM: 2 ranks differ from one process by {err:.3e} (LoRA effect " \
        f"{effect:.3e}; bit for bit)"
    assert (multi - unpatched).abs().max().item() > 1e-2, f"{fmt}: the LoRA did not reach the 2-rank result"
    on_worker = layouts()
    lora_layer = LORA_KEY.removesuffix(".weight")
    quantized_ran = {k for k, v in on_worker.items() if v != "plain"}
    assert on_worker.get(lora_layer) == "plain", f"{fmt}: the worker's LoRA layer computed with {on_worker.get(lora_layer)}"
    assert len(quantized_ran) >= 4 * LAYERS - 1, f"{fmt}: only {len(quantized_ran)} quantized layers ran on the worker"


def test_a_worker_that_would_compute_a_layer_in_another_format_fails_naming_the_layer(comfy, quantized_ltxv):
    """rank 0 sends a layer as fp8; this worker's module (ComfyUI's own mixed-precision Linear) loads what it
    is sent, and a format it cannot load, or a layer it holds in another format, is a TDPGroupError naming
    the layer, never a silently different computation."""
    import comfy.ops
    from ltx_tdp.multigpu import replica
    from ltx_tdp.multigpu.settings import TDPGroupError

    if "float8_e4m3fn" not in tiny_quant.available_formats():
        pytest.skip(f"ComfyUI {comfyui_version()} has no fp8 layers")
    ops = comfy.ops.mixed_precision_ops({}, torch.float32)
    weight = randn(16, 16, seed=1)

    def transfer(entries: dict, module: torch.nn.Module) -> None:
        names = tuple((k, t.dtype, tuple(t.shape)) for k, t in entries.items())
        sent: list[torch.Tensor] = []
        replica.send_weights(iter(entries.items()), names, lambda b: sent.append(b.clone()))
        replica.receive_weights(module, names, lambda b: b.copy_(sent.pop(0)), torch.device("cpu"),
                                torch.device("cpu"))

    fp8 = {"0.bias": torch.zeros(16), **tiny_quant.quantized_entries("0", weight, "float8_e4m3fn")}
    good = torch.nn.Sequential(ops.Linear(16, 16))
    transfer(fp8, good)
    assert tiny_quant.quantized_layers(good) == {"0": "TensorCoreFP8E4M3Layout"}, "the fp8 layer did not arrive"
    unknown = dict(fp8, **{"0.comfy_quant": torch.tensor(list(b'{"format": "float9_imaginary"}'), dtype=torch.uint8)})
    with pytest.raises(TDPGroupError, match=r"cannot load 0 .*float9_imaginary"):
        transfer(unknown, torch.nn.Sequential(ops.Linear(16, 16)))
    with pytest.raises(TDPGroupError, match=r"no weights named 0\.weight_scale"):
        transfer(fp8, torch.nn.Sequential(comfy.ops.disable_weight_init.Linear(16, 16)))
    int8 = tiny_quant.comfy_quant("int8_convrot")
    names = tuple((k, t.dtype, tuple(t.shape)) for k, t in good.state_dict().items())
    with pytest.raises(TDPGroupError, match=r"layer 0: rank 0 computes with format .*int8_tensorwise.*this worker"):
        replica.check_replica(good, names, {"0.comfy_quant": json.dumps(int8).encode()})
