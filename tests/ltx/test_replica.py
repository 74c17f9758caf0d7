"""A ComfyUI ModelPatcher as a multi-GPU group replicates it (ltx.replica.PatcherReplica): the key
changes when the weights computed with change, and the weights sent are the ones ComfyUI computes with,
weight patches (LoRAs) applied, whether or not ComfyUI has applied them in place yet."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.comfy_runtime import comfyui_version
from ltx_tdp_devkit.tiny_gguf import LORA_KEY


def _patcher():
    import comfy.model_patcher

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    return comfy.model_patcher.ModelPatcher(module, load_device=torch.device("cpu"), offload_device=torch.device("cpu"))


def _source(patcher):
    from ltx_tdp.ltx.replica import PatcherReplica

    return PatcherReplica(patcher, lambda p: None)


def test_the_key_changes_with_weight_patches_and_in_place_edits_not_with_a_plain_clone(comfy):
    base = _patcher()
    key = _source(base).key()
    assert _source(base.clone()).key() == key, "a clone without new patches computes with the same weights"
    lora = base.clone()
    lora.add_patches({"0.weight": (torch.ones(8, 8),)}, 0.5)
    assert _source(lora).key() != key, "a weight patch (a LoRA) left the key unchanged"
    with torch.no_grad():
        base.model[1].bias += 1.0
    assert _source(base).key() != key, "weights changed in place left the key unchanged"


def test_the_weights_sent_are_those_comfyui_computes_with_before_and_after_it_patches_in_place(comfy):
    base = _patcher()
    original = {k: t.clone() for k, t in base.model.state_dict().items()}
    lora = base.clone()
    lora.add_patches({"0.weight": (torch.full((8, 8), 2.0),)}, 0.25)
    before = dict(_source(lora).weights())  # not applied yet: computed with comfy.lora
    lora.patch_model()  # ComfyUI applies the patch in place, keeping the original in `backup`
    try:
        applied = {k: t.clone() for k, t in lora.model.state_dict().items()}
        after = dict(_source(lora).weights())
        plain = dict(_source(base).weights())  # the unpatched clone, while the module holds the patched weights
    finally:
        lora.unpatch_model()
    assert torch.allclose(applied["0.weight"], original["0.weight"] + 0.5), "the patch is not the one expected"
    for key in original:
        assert torch.equal(before[key], applied[key]), f"{key}: computed before loading differs from ComfyUI's"
        assert torch.equal(after[key], applied[key]), f"{key}: read after loading differs from ComfyUI's"
        assert torch.equal(plain[key], original[key]), f"{key}: the unpatched clone sent the patched weight"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, in any dtype (torch.equal has no fp8 kernel)."""
    bits = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def _quantized_patcher(comfy, fmt: str):
    """Two of ComfyUI's mixed-precision Linears loaded from `fmt` entries (ComfyUI's stored format)."""
    import comfy.model_patcher
    import comfy.ops
    from ltx_tdp_devkit import tiny_quant

    if fmt not in tiny_quant.available_formats():
        pytest.skip(f"ComfyUI {comfyui_version()}'s comfy-kitchen has no {fmt} format")
    ops = comfy.ops.mixed_precision_ops({}, torch.float32)
    module = torch.nn.Sequential(ops.Linear(16, 16), ops.Linear(16, 16))
    gen = torch.Generator().manual_seed(0)
    sd = {}
    for i in range(2):
        sd[f"{i}.bias"] = torch.randn(16, generator=gen)
        sd.update(tiny_quant.quantized_entries(str(i), torch.randn(16, 16, generator=gen), fmt))
    module.load_state_dict(sd)
    assert len(tiny_quant.quantized_layers(module)) == 2, "the layers did not load quantized"
    return comfy.model_patcher.ModelPatcher(module, load_device=torch.device("cpu"), offload_device=torch.device("cpu"))


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "int8_convrot"])
def test_a_patch_on_a_quantized_layer_is_sent_as_comfyui_computes_with_it_loaded_fully_or_on_the_fly(comfy, fmt):
    """Loaded fully, ComfyUI dequantizes, patches and requantizes in place: the weights sent before it does
    so are those codes and scales. Under low-VRAM loading it patches the dequantized weight at each forward
    (comfy.ops.cast_bias_weight): that plain weight is sent, without the layer's quantization entries."""
    import comfy.ops

    base = _quantized_patcher(comfy, fmt)
    lora = base.clone()
    lora.add_patches({"0.weight": (torch.full((16, 16), 0.5),)}, 1.0)
    before = dict(_source(lora).weights())
    lora.patch_model()
    try:
        applied = {k: t.clone() for k, t in lora.model.state_dict().items()}
    finally:
        lora.unpatch_model()
    assert set(before) == set(applied), f"sent {sorted(before)}, ComfyUI holds {sorted(applied)}"
    for key, want in applied.items():
        assert _same(before[key], want), f"{fmt} {key}: the weight computed before loading differs from ComfyUI's"
    lora.patch_model(lowvram_model_memory=1)
    try:
        computed, _ = comfy.ops.cast_bias_weight(lora.model[0], input=torch.zeros(1, 16))
        on_the_fly = dict(_source(lora).weights())
    finally:
        lora.unpatch_model()
    assert not any(k.startswith("0.") and k not in ("0.weight", "0.bias") for k in on_the_fly), \
        f"{fmt}: quantization entries of the layer patched on the fly were sent: {sorted(on_the_fly)}"
    assert torch.equal(on_the_fly["0.weight"], computed), \
        f"{fmt}: the low-VRAM weight sent differs from ComfyUI's by {(on_the_fly['0.weight'] - computed).abs().max():.3e}"
    shift = (computed - base.model[0].weight.dequantize()).mean().item()
    assert abs(shift - 0.5) < 0.01, f"{fmt}: the patch shifted the layer by {shift:.4f}, not 0.5"
    plain = {k: t for k, t in base.model.state_dict().items() if k.startswith("1.")}
    assert all(_same(on_the_fly[k], t) for k, t in plain.items()), f"{fmt}: the unpatched layer changed"


@pytest.fixture(scope="module")
def gguf_q4(comfy):
    """The tiny LTXV in Q4_0 through city96's ComfyUI-GGUF UnetLoaderGGUF (ltx_tdp_devkit.tiny_gguf), and a clone
    with a LoRA-like "diff" patch on one quantized Linear; skips where ComfyUI-GGUF cannot run."""
    from ltx_tdp_devkit import tiny_gguf

    model = tiny_gguf.gguf_loader(comfy)("Q4_0")
    lora = tiny_gguf.with_lora(model)
    return model, lora


def _computed_with(patcher) -> dict[str, torch.Tensor]:
    """key -> the weight and bias each GGUF-quantized layer computes with once ComfyUI has loaded `patcher`: the
    layer's own cast_bias_weight (dequantized, patches applied) for an input in the model's compute dtype."""
    import comfy.model_management
    from ltx_tdp.ltx.replica import ggml_layer

    comfy.model_management.load_models_gpu([patcher])
    dtype = patcher.model.get_dtype_inference() if hasattr(patcher.model, "get_dtype_inference") else torch.float32
    out = {}
    for name, _ in patcher.model.named_modules():
        layer = ggml_layer(patcher.model, name)
        if layer is not None:
            weight, bias = layer.cast_bias_weight(torch.zeros(1, dtype=dtype))
            out[f"{name}.weight"] = weight
            if bias is not None:
                out[f"{name}.bias"] = bias
    return out


def test_a_gguf_models_quantized_layers_are_sent_as_the_layer_dequantizes_them_with_its_lora(comfy, gguf_q4):
    """Whichever clone ComfyUI loaded last, the weights sent for a GGUF model are those its GGML layers compute
    with (bit for bit), plain tensors in the compute dtype; the estimate-only `temp.weight` is not sent, names()
    matches weights(), and rank 0's GGML tensors keep their own patch lists."""
    from ltx_tdp.ltx.replica import is_ggml

    model, lora = gguf_q4
    expected = {"plain": _computed_with(model), "lora": _computed_with(lora)}
    assert len(expected["lora"]) >= 20, f"only {len(expected['lora'])} GGUF-quantized entries"
    changed = (expected["lora"][LORA_KEY] - expected["plain"][LORA_KEY]).abs().max().item()
    assert changed > 1e-2, f"the LoRA changed its layer's computed weight by only {changed:.3e}"
    weight = lora.model.diffusion_model.transformer_blocks[1].ff.net[0].proj.weight
    patches_before = list(weight.patches)
    for loaded_last in ("lora", "plain"):
        _computed_with(lora if loaded_last == "lora" else model)
        for label, patcher in (("plain", model), ("lora", lora)):
            source = _source(patcher)
            sent = dict(source.weights())
            assert not [k for k in sent if k.endswith(".temp.weight")], "the estimate's temp.weight was sent"
            assert [(k, t.dtype, tuple(t.shape)) for k, t in sent.items()] == list(source.names())
            for key, want in expected[label].items():
                got = sent[key]
                assert not is_ggml(got) and not got.is_meta, f"{key}: sent as {type(got).__name__} {got.device}"
                assert torch.equal(got, want), f"{label} ({loaded_last} loaded last) {key}: differs by " \
                    f"{(got - want).abs().max().item():.3e}"
    _computed_with(lora)
    assert len(weight.patches) == len(patches_before), "sending changed rank 0's GGML patch list"


def test_a_gguf_models_key_changes_with_its_lora_and_its_recipe_builds_comfyuis_own_layers(comfy, gguf_q4):
    model, lora = gguf_q4
    assert _source(model.clone()).key() == _source(model).key(), "a clone without patches changed the key"
    assert _source(lora).key() != _source(model).key(), "the LoRA left the key unchanged"
    from ltx_tdp.ltx.model.job import ModelRecipe
    from ltx_tdp.ltx.replica import PatcherReplica, is_ggml_ops

    assert is_ggml_ops(model.model.model_config.custom_operations), "the GGUF model is not built with GGMLOps"
    recipe = PatcherReplica(lora, ModelRecipe.of).recipe()
    assert recipe.attributes["custom_operations"] is None, recipe.attributes["custom_operations"]
    assert is_ggml_ops(model.model.model_config.custom_operations), "the recipe changed rank 0's model config"
    replica = recipe.build(torch.device("cpu")).module
    layer = replica.diffusion_model.transformer_blocks[1].ff.net[0].proj
    assert type(layer).__module__.startswith("comfy."), f"the worker's layer is {type(layer)}"
