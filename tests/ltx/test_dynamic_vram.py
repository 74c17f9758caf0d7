"""A LoRA'd model under ComfyUI's Dynamic VRAM (its default on NVIDIA) replicates with exactly the weights ComfyUI
computes with: for a layer Dynamic VRAM casts at its forward, the patched weight it keeps in VRAM (patched in
the compute dtype, rounded into the stored fp8 with ComfyUI's seed for the layer); for a small layer it loads
whole, the weight patched in place. Each patched weight is computed once per send (`names` computes none).

Mocked, because Dynamic VRAM cannot start on a CPU (`comfy_aimdo` has no host buffers or VRAM arena here;
`--enable-dynamic-vram --cpu` does not start): the `ModelPatcherDynamic` is ComfyUI's class built without its
aimdo buffers; its `load` is replaced by the same attributes it sets (`{param}_lowvram_function`, `seed_key`,
`comfy_cast_weights`; small layers patched in place by its own `patch_weight_to_device`); the VRAM copy a layer's
forward writes is a CPU buffer handed to ComfyUI's own `comfy.ops.resolve_cast_module_with_vbar`, which is
driven for a first and a second forward. On a CPU rank 0 itself cannot compute through this path, so a group
run cannot show it; the weights sent are compared with ComfyUI's kept copy instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

WIDE = {"num_attention_heads": 2, "attention_head_dim": 64, "cross_attention_dim": 128}
"""Layers wider than Dynamic VRAM's 16 KiB whole-load limit in fp8 (the suite's tiny LTXV has none)."""


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    bits = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


@pytest.fixture(scope="module")
def fp8_ltxv(comfy):
    """A tiny LTXV with 128-wide layers, stored in fp8 by UNETLoader (computed in fp32 on a CPU). Skips on a
    ComfyUI without Dynamic VRAM (0.3.x has no `ModelPatcherDynamic`; the pack then never meets it)."""
    import folder_paths
    from comfy import model_patcher  # not `import comfy.…`: `comfy` is the fixture here

    if not hasattr(model_patcher, "ModelPatcherDynamic"):
        pytest.skip("this ComfyUI has no Dynamic VRAM (comfy.model_patcher.ModelPatcherDynamic, ComfyUI 0.2x+)")

    from ltx_tdp_devkit.tiny_models import build_ltxv

    name = "tdp_wide_ltxv.safetensors"
    build_ltxv(Path(folder_paths.get_folder_paths("diffusion_models")[0]) / name, seed=7, **WIDE)
    folder_paths.filename_list_cache.clear()
    (model,) = comfy.run_node("UNETLoader", unet_name=name, weight_dtype="fp8_e4m3fn")
    return model


def _dynamic_patcher(base_model):
    """ComfyUI's ModelPatcherDynamic over `base_model`, built without the aimdo host buffers a CPU lacks."""
    import comfy.model_patcher as mp

    patcher = object.__new__(mp.ModelPatcherDynamic)
    mp.ModelPatcher.__init__(patcher, base_model, torch.device("cpu"), torch.device("cpu"))
    patcher.unpin_all_weights = lambda: None  # its pins are aimdo's, which this process has none of
    return patcher


def _load_like_dynamic_vram(patcher) -> dict[str, str]:
    """What ModelPatcherDynamic.load leaves on the layers (mocked: it needs aimdo): layers over 16 KiB cast at
    forward with their patches as `{param}_lowvram_function`, smaller ones patched in place. {layer: how}."""
    how = {}
    _set_up_layers(patcher, how)
    patcher.model.current_weight_patches_uuid = patcher.patches_uuid
    return how


def _set_up_layers(patcher, how: dict[str, str]) -> None:
    import comfy.model_management
    import comfy.model_patcher as mp

    for name, layer in patcher.model.named_modules():
        if not hasattr(layer, "comfy_cast_weights"):
            continue
        layer.comfy_cast_weights, layer.seed_key = True, name
        dynamic = comfy.model_management.module_size(layer) > 16 * 1024
        for param in ("weight", "bias"):
            key = f"{name}.{param}"
            if getattr(layer, param, None) is None:
                continue
            if dynamic:
                setattr(layer, f"{param}_lowvram_function",
                        mp.LowVramPatch(key, patcher.patches) if key in patcher.patches else None)
                setattr(layer, f"{param}_function", [])
            elif key in patcher.patches:
                patcher.patch_weight_to_device(key, device_to=torch.device("cpu"), force_cast=True)
        how[name] = "at forward" if dynamic else "whole"


def _forward_twice(layer, dtype: torch.dtype) -> torch.Tensor:
    """ComfyUI's own forward-time cast of `layer` under Dynamic VRAM, run for a first forward (which patches and
    writes the VRAM copy) and a second (which reads it); the weight the VRAM copy holds after both."""
    import comfy.memory_management as memory
    import comfy.ops

    tensors = [layer.weight, layer.bias]
    vram = torch.empty(memory.vram_aligned_size(tensors), dtype=torch.uint8)  # the VRAM copy, here on the CPU
    for view, t in zip(memory.interpret_gathered_like(tensors, vram), tensors):
        if t is not None:
            view.copy_(t)
    layer._prefetch = {"signature": "held in VRAM", "resident": False, "xfer_dest": vram, "cast_dest": None,
                       "cast_geometry": memory.tensors_to_geometries(tensors), "needs_cast": False}
    first, _ = comfy.ops.resolve_cast_module_with_vbar(layer, dtype, torch.device("cpu"), dtype, None, False)
    second, _ = comfy.ops.resolve_cast_module_with_vbar(layer, dtype, torch.device("cpu"), dtype, None, False)
    del layer._prefetch
    assert torch.equal(second, layer._v_weight.to(dtype)), "the second forward did not compute with the kept copy"
    return layer._v_weight


@torch.no_grad()  # as ComfyUI samples (under inference mode)
def test_a_lora_under_dynamic_vram_is_sent_as_the_weight_comfyui_keeps_in_vram(comfy, fp8_ltxv, monkeypatch):
    import comfy.float
    import comfy.lora
    import comfy.utils

    from ltx_tdp.ltx import replica as replica_module
    from ltx_tdp.ltx.replica import PatcherReplica

    model = fp8_ltxv.model
    weights = {k: t for k, t in model.state_dict().items() if k.endswith(".weight") and t.ndim == 2}
    wide = [k for k, t in weights.items() if t.numel() > 16 * 1024][:3]
    small = [k for k, t in weights.items() if t.numel() * t.element_size() < 8 * 1024][:1]
    assert len(wide) == 3 and small and all(weights[k].dtype == torch.float8_e4m3fn for k in wide), \
        f"the fixture lacks fp8 layers of both sizes: {[(k, weights[k].dtype, tuple(weights[k].shape)) for k in weights]}"
    originals = {k: weights[k].clone() for k in wide + small}
    gen = torch.Generator().manual_seed(3)
    patcher = _dynamic_patcher(model)
    patcher.add_patches({k: (torch.randn(weights[k].shape, generator=gen) * 0.05,) for k in wide + small}, 1.0)
    how = _load_like_dynamic_vram(patcher)
    try:
        dtype = model.get_dtype_inference()
        assert dtype == torch.float32, f"expected fp32 compute for fp8 weights on a CPU, got {dtype}"
        computed = []
        real_kept = replica_module.kept_weight
        monkeypatch.setattr(replica_module, "kept_weight", lambda *a: computed.append(a[2]) or real_kept(*a))
        source = PatcherReplica(patcher, lambda p: None)
        names = source.names()
        assert not computed, f"listing the names computed {computed}: a send would merge every LoRA twice"
        sent = dict(source.weights())
        assert [(k, t.dtype, tuple(t.shape)) for k, t in sent.items()] == list(names), "names and weights disagree"
        for key in wide:
            owner = key.rpartition(".")[0]
            assert how[owner] == "at forward", f"{owner} ({how[owner]}) should be cast at forward"
            kept = _forward_twice(comfy.utils.get_attr(model, owner), dtype)
            assert _same(sent[key], kept), \
                f"{key}: sent differs from Dynamic VRAM's kept copy in {(sent[key].float() != kept.float()).sum()} values"
            merged = comfy.lora.calculate_weight(patcher.patches[key], originals[key].float(), key)
            by_param = comfy.float.stochastic_rounding(merged, torch.float8_e4m3fn, seed=comfy.utils.string_to_seed(key))
            assert not _same(by_param, kept), f"{key}: rounding with the parameter's seed (the estimate-based " \
                "loader's) gave Dynamic VRAM's bits too: this test would not tell the two apart"
        assert sorted(computed) == sorted(wide), f"computed {computed}, expected each of {wide} once"
        for key in small:
            owner = key.rpartition(".")[0]
            assert how[owner] == "whole", f"{owner} should be loaded whole"
            assert _same(sent[key], model.state_dict()[key]), f"{key}: sent differs from ComfyUI's in-place patch"
            assert not _same(sent[key], originals[key]), f"{key}: the patch did not change the weight"
    finally:  # the in-place patches undone (ComfyUI's unpatch of a dynamic patcher needs aimdo)
        for key, saved in patcher.backup.items():
            comfy.utils.set_attr_param(model, key, saved.weight)
        patcher.backup.clear()
