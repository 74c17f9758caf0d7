"""A weight patch (a LoRA) as ComfyUI's Dynamic VRAM computes with it, for replicas that must compute alike.

Dynamic VRAM (ComfyUI 0.2x+, on by default on NVIDIA: `comfy.model_patcher.ModelPatcherDynamic`) keeps the
weights in system memory and casts each layer onto the GPU at its forward. `ModelPatcherDynamic.load` puts a
patched weight's patch in the layer's `{param}_lowvram_function` (not `{param}_function`, where the estimate-
based loader puts its low-VRAM patches), and `comfy.ops` then, at the layer's forward on the GPU:

* casts the stored weight to the dtype the layer computes in (dequantizing a quantized one) and applies
  the patch in that dtype (`comfy.lora.calculate_weight`, intermediate dtype = that dtype);
* rounds the result back into the stored format, with the seed `comfy.utils.string_to_seed(<layer name>)`
  (`comfy.float.stochastic_rounding`, or the quantized weight's `requantize_from_float`), and keeps that
  copy in VRAM: every later forward computes with it (the first forward of a freshly cast layer uses the
  unrounded result once; for bf16 / fp16 / fp32 weights computed in their own dtype both are the same).

What replicas get is that kept copy. Layers of at most DYNAMIC_MIN_MODULE_BYTES, and layers a patch resizes,
are loaded whole and patched in place as the estimate-based loader does (ltx.replica takes them as they are).
"""

from __future__ import annotations

from typing import Any

import torch

DYNAMIC_MIN_MODULE_BYTES = 16 * 1024
"""`ModelPatcherDynamic.load` loads a layer of at most this many bytes whole (patched in place) instead of
casting it at each forward."""


def is_dynamic(patcher: Any) -> bool:
    """Whether `patcher` loads its model with Dynamic VRAM (ComfyUI's `ModelPatcher.is_dynamic`)."""
    return bool(getattr(patcher, "is_dynamic", lambda: False)())


def patched_at_forward(patcher: Any, layer: torch.nn.Module, owner: str) -> bool:
    """Whether Dynamic VRAM patches the weights of `layer` (named `owner`) at its forward rather than in place:
    a dynamic patcher, a layer that casts its weights (comfy.ops), larger than DYNAMIC_MIN_MODULE_BYTES, whose
    patches keep every weight's shape (ModelPatcherDynamic.load's own rule)."""
    import comfy.lora
    import comfy.model_management

    if not is_dynamic(patcher) or not hasattr(layer, "comfy_cast_weights"):
        return False
    if comfy.model_management.module_size(layer) <= DYNAMIC_MIN_MODULE_BYTES:
        return False
    for name in ("weight", "bias"):
        key, weight = f"{owner}.{name}" if owner else name, getattr(layer, name, None)
        if key in patcher.patches and weight is not None:
            if tuple(comfy.lora.calculate_shape(patcher.patches[key], weight, key)) != tuple(weight.shape):
                return False
    return True


@torch.no_grad()
def kept_weight(patcher: Any, layer: torch.nn.Module, key: str, original: torch.Tensor,
                dtype: torch.dtype) -> torch.Tensor:
    """Weight `key` of `layer` (stored as `original`) with `patcher`'s patches, as Dynamic VRAM keeps it in VRAM
    after the layer's first forward in `dtype` (module docstring), on the patcher's load device: the stored
    format, rounded with ComfyUI's seed for the layer."""
    import comfy.float
    import comfy.lora
    import comfy.utils

    owner = key.rpartition(".")[0]
    on_device = original.to(device=patcher.load_device)
    x = on_device.to(dtype=dtype)
    if is_quantized(x):
        x = x.dequantize()
    x = comfy.lora.calculate_weight(patcher.patches[key], x, key, intermediate_dtype=x.dtype)
    seed = comfy.utils.string_to_seed(owner)
    if not is_quantized(original):
        return comfy.float.stochastic_rounding(x, original.dtype, seed=seed)
    if hasattr(on_device, "requantize_from_float"):  # ComfyUI 0.3x
        return on_device.requantize_from_float(x, scale="recalculate", stochastic_rounding=seed)
    from comfy.quant_ops import QuantizedTensor  # ComfyUI 0.2x

    return QuantizedTensor.from_float(x, layer.layout_type, scale="recalculate", stochastic_rounding=seed)


def is_quantized(value: torch.Tensor) -> bool:
    """Whether `value` is a ComfyUI QuantizedTensor (comfy-kitchen): codes plus scales."""
    return hasattr(value, "_layout_cls") and callable(getattr(value, "dequantize", None))
