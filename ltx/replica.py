"""A ComfyUI ModelPatcher as a multi-GPU group replicates it (multigpu.api.ReplicaSource): the key that
says when the workers' copy is stale, the recipe that builds the empty module there, and the weights
exactly as rank 0 computes with them (ComfyUI's weight patches, e.g. LoRAs, applied: in place, on the fly
by the estimate-based loader's low-VRAM mode, or by Dynamic VRAM, ltx.dynamic_vram).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .dynamic_vram import is_quantized, kept_weight, patched_at_forward

KEY_SAMPLES = 64
"""Tensors whose first values enter a replica key (evenly spaced over the state dict)."""


class PatcherReplica:
    """The replica source of `patcher` (a model's, or a VAE's `vae.patcher`); `make_recipe(patcher)` gives
    the recipe (ltx.model.job.ModelRecipe, ltx.vae.job.VaeRecipe)."""

    def __init__(self, patcher: Any, make_recipe: Callable[[Any], Any]):
        self.patcher, self.make_recipe, self.module = patcher, make_recipe, patcher.model

    def recipe(self) -> Any:
        return self.make_recipe(self.patcher)

    def key(self) -> str:
        """Changes whenever the weights computed with change: another module, another set of weight patches
        (ComfyUI gives every new set a new `patches_uuid`, e.g. a LoRA), or weights changed in place (a
        fingerprint of a few values of KEY_SAMPLES tensors, read from the unpatched originals)."""
        p, backup = self.patcher, getattr(self.patcher, "backup", {})
        sd = self.module.state_dict()
        keys = list(sd)
        samples = []
        for key in keys[:: max(1, len(keys) // KEY_SAMPLES)]:
            flat = (backup[key].weight if key in backup else sd[key]).detach().reshape(-1)
            if flat.numel():
                samples.append(flat[:: max(1, flat.numel() // 4)][:4].to(device="cpu", dtype=torch.float64))
        digest = hashlib.sha1(torch.cat(samples).numpy().tobytes() if samples else b"").hexdigest()[:16]
        return f"{type(self.module).__name__}/{id(self.module):x}/{p.patches_uuid}/{len(p.patches)}/{len(keys)}/{digest}"

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(key, tensor) of the module's state dict with the patcher's weight patches applied, as rank 0
        computes with them, each patched weight computed once per call, on the patcher's load device:

        * Patched in place for this patcher (ComfyUI keeps the original in `backup`): taken as they are.
        * Patched at every forward by Dynamic VRAM (ltx.dynamic_vram): the patched weight it keeps in VRAM,
          in the stored format, rounded with ComfyUI's seed for the layer.
        * Patched on the fly at every forward (the estimate-based loader's low-VRAM mode puts a LowVramPatch
          among the layer's weight functions): ComfyUI computes with the original weight cast to the compute
          dtype (a quantized one dequantized) plus the patch, in that dtype, and so do the workers: that weight
          is sent as a plain tensor and the layer's quantization entries are left out.
        * Not applied yet (another clone loaded last): computed as ComfyUI patches in place, from the
          original in its LoRA compute dtype, a quantized weight dequantized first (the layer's
          `convert_weight`), through `comfy.lora.calculate_weight`, then rounded back
          (`comfy.float.stochastic_rounding`) or requantized in the layer's own format (its `set_weight`).

        A quantized weight is several state-dict entries (codes, scales): all of them are replaced together.
        """
        return self._walk(compute=True)

    def names(self) -> tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]:
        """(key, dtype, shape) of what `weights` yields, in its order, without computing any patched weight."""
        return tuple((k, t.dtype, tuple(t.shape)) for k, t in self._walk(compute=False))

    def _walk(self, compute: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """`weights`, or with `compute` False tensors of the same dtypes and shapes standing in for computed ones."""
        patches = self.patcher.patches
        in_sync = getattr(self.module, "current_weight_patches_uuid", None) == self.patcher.patches_uuid
        backup = getattr(self.patcher, "backup", {})
        replaced: dict[str, torch.Tensor | None] = {}
        for key, tensor in self.module.state_dict().items():
            if key in replaced:
                value = replaced.pop(key)
                if value is not None:
                    yield key, value
                continue
            original = backup[key].weight if key in backup else None
            if key in patches and not (in_sync and key in backup):
                entries = self._patched(key, original, compute)
            elif key in patches or original is None:
                yield key, tensor
                continue
            else:
                entries = _entries(key, original)
            replaced.update(entries)
            yield key, replaced.pop(key)

    def _patched(self, key: str, original: torch.Tensor | None, compute: bool) -> dict[str, torch.Tensor | None]:
        """The state-dict entries of weight `key` with this patcher's patches applied, from `original` (else
        the module's weight); None for entries that are left out. With `compute` False, stand-ins of the
        same dtypes and shapes (the stored entries, or an empty meta tensor), nothing computed."""
        import comfy.float
        import comfy.lora
        import comfy.model_management
        import comfy.model_patcher
        import comfy.utils

        weight, set_func, convert_func = comfy.model_patcher.get_key_weight(self.module, key)
        original = weight if original is None else original
        owner, _, name = key.rpartition(".")
        layer = comfy.utils.get_attr(self.module, owner) if owner else self.module
        if patched_at_forward(self.patcher, layer, owner):
            if not compute:
                return _entries(key, original)
            return _entries(key, kept_weight(self.patcher, layer, key, original, self._compute_dtype(original)))
        device = self.patcher.load_device
        if any(getattr(f, "is_lowvram_patch", False) for f in getattr(layer, f"{name}_function", ())):
            dtype = self._compute_dtype(original)
            dropped = dict.fromkeys([*_entries(key, original), f"{owner}.comfy_quant", f"{owner}.input_scale"])
            if not compute:
                sent = dtype if is_quantized(original) else original.dtype
                return {**dropped, key: torch.empty(original.shape, dtype=sent, device="meta")}
            temp = original.to(device=device, dtype=dtype, copy=True)
            temp = temp.dequantize() if is_quantized(temp) else temp
            out = comfy.lora.calculate_weight(self.patcher.patches[key], temp, key, intermediate_dtype=dtype)
            return {**dropped, key: out if is_quantized(original) else out.to(original.dtype)}
        if not compute:
            return {key: original} if set_func is None else _entries(key, original)
        compute_dtype = getattr(comfy.model_management, "lora_compute_dtype", lambda _d: torch.float32)(device)
        temp = original.to(device=device, dtype=compute_dtype, copy=True)
        if convert_func is not None:
            temp = convert_func(temp, inplace=True)
        out = comfy.lora.calculate_weight(self.patcher.patches[key], temp, key)
        seed = getattr(comfy.utils, "string_to_seed", None) or comfy.model_patcher.string_to_seed  # 0.3.x: there
        seed = seed(key)
        if set_func is None:
            return {key: comfy.float.stochastic_rounding(out, original.dtype, seed=seed)}
        return _entries(key, set_func(out, seed=seed, return_weight=True))

    def _compute_dtype(self, weight: torch.Tensor) -> torch.dtype:
        """The dtype the model's layers compute in (a ComfyUI model casts its input to it); for another
        module, `weight`'s own (a QuantizedTensor's is the dtype it dequantizes to)."""
        model = self.patcher.model
        return model.get_dtype_inference() if hasattr(model, "get_dtype_inference") else weight.dtype


def _entries(key: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state-dict entries of parameter `key` holding `value`: a QuantizedTensor gives its codes and scales
    (`key`, `key_scale`, ...), any other tensor itself."""
    return value.state_dict(key) if is_quantized(value) else {key: value}
