"""A ComfyUI ModelPatcher as a multi-GPU group replicates it (multigpu.api.ReplicaSource): the key that
says when the workers' copy is stale, the recipe that builds the empty module there, and the weights
exactly as rank 0 computes with them (ComfyUI's weight patches, e.g. LoRAs, applied: in place, on the fly
by the estimate-based loader's low-VRAM mode, or by Dynamic VRAM, ltx.dynamic_vram; a GGUF model's quantized
layers, city96's ComfyUI-GGUF, as the dequantized weight they compute with). Keys are the uncompiled module's:
with core's TorchCompileModel the workers still build and receive the plain module.
"""

from __future__ import annotations

import dataclasses
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
        """`make_recipe(patcher)`; for a GGUF model (its model config's `custom_operations` are ComfyUI-GGUF's
        GGMLOps, which a worker cannot import) with those operations dropped, so workers build ComfyUI's own
        layers: they receive plain weights (`weights`)."""
        recipe = self.make_recipe(self.patcher)
        attributes = getattr(recipe, "attributes", None)
        if isinstance(attributes, dict) and is_ggml_ops(attributes.get("custom_operations")):
            recipe = dataclasses.replace(recipe, attributes={**attributes, "custom_operations": None})
        return recipe

    def key(self) -> str:
        """Changes whenever the weights computed with change: another module, another set of weight patches
        (ComfyUI gives every new set a new `patches_uuid`, e.g. a LoRA), or weights changed in place (a
        fingerprint of a few values of KEY_SAMPLES tensors, read from the unpatched originals)."""
        p, backup = self.patcher, getattr(self.patcher, "backup", {})
        sd = _state_dict(self.module)
        keys = list(sd)
        samples = []
        for key in keys[:: max(1, len(keys) // KEY_SAMPLES)]:
            stored = backup[key].weight if key in backup else self._stored(key, sd[key])
            if stored is None:
                continue
            flat = stored.detach().reshape(-1)
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

        A GGUF model's quantized layer (ComfyUI-GGUF's GGMLLayer, whose state dict holds only empty stand-ins)
        dequantizes its weight and applies the weight's patches at every forward, in the dtype it computes in: its
        weight and bias are sent as that layer's own `get_weight` gives them, the patches being this patcher's
        (where GGUFModelPatcher puts them, the GGML tensor's `patches`), in the model's compute dtype; its
        estimate-only entry (`<layer>.temp.weight`) is left out. Its other layers are ComfyUI's (above).
        """
        return self._walk(compute=True)

    def names(self) -> tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]:
        """(key, dtype, shape) of what `weights` yields, in its order, without computing any patched weight."""
        return tuple((k, t.dtype, tuple(t.shape)) for k, t in self._walk(compute=False))

    def _walk(self, compute: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """`weights`, or with `compute` False tensors of the same dtypes and shapes standing in for computed ones."""
        replaced: dict[str, torch.Tensor | None] = {}
        for key, tensor in _state_dict(self.module).items():
            owner, _, name = key.rpartition(".")
            layer = ggml_layer(self.module, owner)
            if layer is not None:
                yield key, self._ggml_entry(layer, key, name, compute)
                continue
            if name == "weight" and owner.endswith(".temp") and ggml_layer(self.module, owner[:-5]) is not None:
                continue  # GGMLLayer's room for dequantizing its largest weight, in the memory estimate only
            if key in replaced:
                value = replaced.pop(key)
                if value is not None:
                    yield key, value
                continue
            replaced.update(self._as_computed(key, tensor, compute))
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

    def _stored(self, key: str, value: torch.Tensor) -> torch.Tensor | None:
        """What the module stores for state-dict entry `key` (`value`): `value` itself, except for a GGUF layer's
        empty stand-in (a meta tensor): its GGML tensor's raw data (the codes), or None for an entry that is
        no parameter (the estimate's `temp.weight`)."""
        if not value.is_meta:
            return value
        owner, _, name = key.rpartition(".")
        try:
            real = getattr(self.module.get_submodule(owner), name, None)
        except AttributeError:
            return None
        if real is None or real.is_meta:
            return None
        return real.as_subclass(torch.Tensor) if is_ggml(real) else real

    @torch.no_grad()
    def _ggml_entry(self, layer: torch.nn.Module, key: str, name: str, compute: bool) -> torch.Tensor:
        """Parameter `name` (`key`) of the GGUF layer `layer` as the layer computes with it (`weights`): its own
        `get_weight` on the stored tensor with this patcher's patches, in the model's compute dtype, on the
        load device. With `compute` False an empty meta tensor of that dtype and shape."""
        from .model.facts import inference_dtype  # here: ltx.model imports this module

        tensor = getattr(layer, name)
        dtype = inference_dtype(self.patcher.model)
        if not compute:
            return torch.empty(tuple(tensor.shape), dtype=dtype, device="meta")
        device = self.patcher.load_device
        patches = self.patcher.patches
        if is_ggml_quantized(tensor):
            # A GGMLTensor of its own (GGUF's own class and constructor) holding the stored codes and the patch
            # list GGUFModelPatcher.patch_weight_to_device sets: rank 0's tensor and its `patches` stay untouched.
            stored = type(tensor)(tensor.as_subclass(torch.Tensor).to(device), tensor_type=tensor.tensor_type,
                                  tensor_shape=tensor.tensor_shape,
                                  patches=[(patches[key], key)] if key in patches else [])
        else:  # an F32 / F16 entry of a quantized layer: GGUFModelPatcher patches it in place
            stored = self._in_place(key, tensor).to(device)
        weight = layer.get_weight(stored, dtype)
        if is_ggml(weight):
            weight = weight.as_subclass(torch.Tensor)
        return weight.to(device=device, dtype=dtype)

    def _in_place(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        """The value of the unquantized parameter `key` (stored as `tensor`) once this patcher has patched it in
        place, as `_as_computed` decides for any other weight (a GGMLTensor as a plain tensor)."""
        value = self._as_computed(key, tensor, True)[key]
        return value.as_subclass(torch.Tensor) if value is tensor and is_ggml(value) else value

    def _as_computed(self, key: str, tensor: torch.Tensor, compute: bool) -> dict[str, torch.Tensor | None]:
        """The state-dict entries of weight `key` (stored as `tensor`) as rank 0 computes with it (`weights`):
        `tensor` as it is where this patcher's patches are applied in place or it has none; computed from the
        original (`_patched`) where they are not applied yet; the original where another patcher's are."""
        backup = getattr(self.patcher, "backup", {})
        in_sync = getattr(self.module, "current_weight_patches_uuid", None) == self.patcher.patches_uuid
        original = backup[key].weight if key in backup else None
        if key in self.patcher.patches and not (in_sync and key in backup):
            return self._patched(key, original, compute)
        if key in self.patcher.patches or original is None:
            return {key: tensor}
        return _entries(key, original)

    def _compute_dtype(self, weight: torch.Tensor) -> torch.dtype:
        """The dtype the model's layers compute in (a ComfyUI model casts its input to it); for another
        module, `weight`'s own (a QuantizedTensor's is the dtype it dequantizes to)."""
        model = self.patcher.model
        return model.get_dtype_inference() if hasattr(model, "get_dtype_inference") else weight.dtype


def _entries(key: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state-dict entries of parameter `key` holding `value`: a QuantizedTensor gives its codes and scales
    (`key`, `key_scale`, ...), any other tensor itself."""
    return value.state_dict(key) if is_quantized(value) else {key: value}


def is_ggml(value: Any) -> bool:
    """Whether `value` is a ComfyUI-GGUF GGMLTensor (duck-typed: a tensor with `tensor_type` and `tensor_shape`)."""
    return isinstance(value, torch.Tensor) and hasattr(value, "tensor_type") and hasattr(value, "tensor_shape")


def is_ggml_quantized(value: Any) -> bool:
    """Whether `value` is a GGMLTensor in a quantized GGML type (any but F32 and F16, which torch computes with)."""
    if not is_ggml(value) or value.tensor_type is None:
        return False
    return getattr(value.tensor_type, "name", str(value.tensor_type)) not in ("F32", "F16")


def ggml_layer(module: torch.nn.Module, owner: str) -> torch.nn.Module | None:
    """Submodule `owner` of `module` when it is a ComfyUI-GGUF GGMLLayer computing through GGUF's dequantizing
    path (its own `is_ggml_quantized()`: a quantized weight or bias), else None."""
    try:
        layer = module.get_submodule(owner) if owner else module
    except AttributeError:
        return None
    if not callable(getattr(layer, "get_weight", None)) or not callable(getattr(layer, "is_ggml_quantized", None)):
        return None
    return layer if layer.is_ggml_quantized() else None


def is_ggml_ops(ops: Any) -> bool:
    """Whether `ops` (a model config's `custom_operations`) are ComfyUI-GGUF's GGMLOps: their Linear is a
    GGMLLayer (it has `get_weight` and `is_ggml_quantized`)."""
    linear = getattr(ops, "Linear", None)
    return callable(getattr(linear, "get_weight", None)) and callable(getattr(linear, "is_ggml_quantized", None))


COMPILED_PREFIX = "_orig_mod."
"""What torch.compile's OptimizedModule puts before its module's state-dict keys (core's TorchCompileModel swaps the
compiled diffusion model in for each model call)."""


def _state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`module.state_dict()` under the names of the uncompiled module: every `_orig_mod.` segment of a compiled
    submodule's keys left out (an OptimizedModule hands attribute access on to the module it wraps, so the plain
    names still reach every tensor). The workers build the uncompiled module, and ComfyUI's weight patches and
    backups use these names."""
    return {key.replace("." + COMPILED_PREFIX, ".").removeprefix(COMPILED_PREFIX): value
            for key, value in module.state_dict().items()}

