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
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no LTX-2 (comfy.ldm.lightricks.av_model)")
    import folder_paths

    folder = folder_paths.get_folder_paths("diffusion_models")[0]
    models = {}

    def load(fmt: str):
        if fmt not in tiny_quant.available_formats():
            pytest.skip(f"ComfyUI {comfy.comfyui_version()}'s comfy-kitchen has no {fmt} format")
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
