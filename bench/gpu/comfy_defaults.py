"""The pack under ComfyUI's own GPU mechanisms, as users start ComfyUI (issue 30, items 4 and 5).

Both steps use a tiny LTX-Video whose layers are wider than Dynamic VRAM's 16 KiB whole-load limit (the test
suite's tiny models have none), loaded by ComfyUI's own loader with ComfyUI's default devices, as UNETLoader
loads a model: on an NVIDIA GPU under Dynamic VRAM (runtime.py starts it as main.py does).

* lora_under_dynamic_vram: a LoRA'd model called twice through 2 x 2 TDP in this process (Dynamic VRAM
  casts, patches and keeps each wide layer at the first call), then through a 2-rank group on this device
  (gloo): the weights a group sends equal the copies ComfyUI computes with (Dynamic VRAM's VRAM copies, or
  the weights patched in place where it is off), and the group equals the single process.
* memory_comfyui_is_asked_for: one sampling step at cfg 3 of a 2 x 2 TDP model through `comfy.sample.sample`:
  what `estimate_memory` is asked for (the largest tile plus the pack's buffers, not the whole frame), whether
  cond and uncond ran as one batch, and the step's peak memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from correctness import GROUP_LIMIT, relative
from models import call_inputs, model_call, tdp
from runtime import Records, device, measure
from sizes import Layout

WIDE = {"num_attention_heads": 2, "attention_head_dim": 64, "cross_attention_dim": 128}
LATENT = (2, 32, 32)
"""(frames, height, width); 2 x 2 tiles with overlap 2 are [0, 17) and [15, 32) on each axis."""
TILE = (1, 128, 2, 17, 17)
LAYOUT = Layout(2, 2, 2)
SIGMA = 0.6
LORA_LAYERS = 4


def load_wide_ltxv(base_dir: Path, dtype: torch.dtype) -> Any:
    """The wide tiny LTX-Video through ComfyUI's loader, weights in `dtype`, on ComfyUI's default devices."""
    import comfy.sd
    from ltx_tdp_devkit import tiny_models

    path = base_dir / "wide_ltxv.safetensors"
    if not path.exists():
        tiny_models.build_ltxv(path, seed=7, **WIDE)
    return comfy.sd.load_diffusion_model(str(path), model_options={"dtype": dtype})


def with_lora(patcher: Any, seed: int) -> tuple[Any, list[str]]:
    """A clone of `patcher` with a seeded weight patch (a LoRA's merged difference) on its widest 2-D weights."""
    weights = {k: t for k, t in patcher.model.state_dict().items() if k.endswith(".weight") and t.ndim == 2}
    keys = sorted(weights, key=lambda k: -weights[k].numel())[:LORA_LAYERS]
    gen = torch.Generator().manual_seed(seed)
    clone = patcher.clone()
    clone.add_patches({k: (torch.randn(weights[k].shape, generator=gen) * 0.02,) for k in keys}, 1.0)
    return clone, keys


def _kept_copies(model: Any, keys: list[str]) -> dict[str, torch.Tensor | None]:
    """The weight each LoRA'd layer computes with now: Dynamic VRAM's VRAM copy (None where the layer holds
    none), else the weight ComfyUI patched in place."""
    import comfy.utils
    from ltx_tdp.ltx.dynamic_vram import is_dynamic

    if not is_dynamic(model):
        state = model.model.state_dict()
        return {k: state[k] for k in keys}
    return {k: getattr(comfy.utils.get_attr(model.model, k.rpartition(".")[0]), "_v_weight", None) for k in keys}


def _gib(peak: float | None) -> str:
    return "not measured on the CPU" if peak is None else f"{peak:.2f} GiB"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    bits = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b).to(a.device))


def lora_under_dynamic_vram(rec: Records, base_dir: Path) -> None:
    from ltx_tdp.ltx.dynamic_vram import is_dynamic
    from ltx_tdp.ltx.replica import PatcherReplica
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import resolve_settings

    lora, keys = with_lora(load_wide_ltxv(base_dir, torch.bfloat16), seed=5)
    model = tdp(lora, LAYOUT)
    inputs = call_inputs(model, LATENT, 0, 8, seed=6)
    model_call(model, inputs, SIGMA)  # Dynamic VRAM casts, patches and keeps each wide layer here
    single, seconds, peak = measure(lambda: model_call(model, inputs, SIGMA))
    dynamic = is_dynamic(model)
    sent = dict(PatcherReplica(model, lambda p: None).weights())
    kept = _kept_copies(model, keys)
    equal = [k for k in keys if kept[k] is not None and _same(sent[k], kept[k])]
    held = [k for k in keys if kept[k] is not None]
    rec.add("LoRA'd weights sent == ComfyUI's", "ok" if held and len(equal) == len(keys) else "fail",
            value=len(keys) - len(equal), limit=0, detail=f"{type(model).__name__}, Dynamic VRAM "
            f"{'on' if dynamic else 'off'}; {len(equal)} of {len(keys)} LoRA'd layers bit-identical to the copy "
            f"ComfyUI computes with ({len(held)} held one); a 2x2 call {seconds:.2f} s, peak {_gib(peak)}")
    dev = str(device())
    group = get_group(resolve_settings(2, f"{dev},{dev}", "gloo", 60, "127.0.0.1", 0, local_device=dev))
    try:
        multi = model_call(tdp(lora, LAYOUT, group), inputs, SIGMA)
    finally:
        group.shutdown()
    err = relative(inputs.video(multi), inputs.video(single))
    rec.add("2-rank group with a LoRA == single process", "ok" if err <= GROUP_LIMIT else "fail", value=err,
            limit=GROUP_LIMIT, detail=f"Dynamic VRAM {'on' if dynamic else 'off'} on rank 0; max |diff| / max |x0| "
            f"= {err:.2e}; bit-identical: {torch.equal(multi, single)}")


def memory_comfyui_is_asked_for(rec: Records, base_dir: Path) -> None:
    import comfy.sample
    from ltx_tdp_devkit.estimates import (comfyui_estimate, pack_buffers, record_estimates, record_tile_batches,
                                          within_one_cell)
    from ltx_tdp_devkit.ltx_helpers import conditioning, randn

    base = load_wide_ltxv(base_dir, torch.bfloat16)
    model = tdp(base, LAYOUT)
    seen, batches = record_estimates(model), record_tile_batches(model)
    latent = randn(1, 128, *LATENT, seed=1)
    _, seconds, peak = measure(lambda: comfy.sample.sample(
        model, randn(*latent.shape, seed=2), 1, 3.0, "euler", "simple", conditioning(1), conditioning(2), latent,
        denoise=0.6, seed=1))
    tile, full = comfyui_estimate(base, TILE), comfyui_estimate(base, (1, 128, *LATENT))
    buffers = pack_buffers(2, 128 * torch.Size(LATENT).numel(), torch.Size(TILE).numel())
    (shape, asked, _minimum), = seen
    ok = within_one_cell(asked, tile, buffers, TILE) and asked < full
    mib = lambda v: f"{v / 2**20:.2f} MiB"  # noqa: E731
    rec.add("memory asked for a 2x2 TDP step at cfg 3", "ok" if ok else "fail", value=asked / tile,
            limit=(tile + buffers + tile / TILE[-1]) / tile,
            detail=f"asked {mib(asked)} for noise shape {shape} (ratio to the largest tile's estimate); the largest "
            f"tile {mib(tile)} + the pack's buffers {mib(buffers)}; the whole frame {mib(full)}; tile calls' batches "
            f"{sorted(set(batches))} (2: cond and uncond as one); the step {seconds:.2f} s, peak {_gib(peak)}")
