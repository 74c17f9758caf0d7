"""A ComfyUI ModelPatcher as a multi-GPU group replicates it (multigpu.api.ReplicaSource): the key that
says when the workers' copy is stale, the recipe that builds the empty module there, and the weights
exactly as rank 0 computes with them (ComfyUI's weight patches, e.g. LoRAs, applied).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

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
        """(key, tensor) of the module's state dict with the patcher's weight patches applied.

        Weights patched in place for this patcher (ComfyUI keeps the original in `backup`) are taken as they
        are; patches not applied in place (low-VRAM loading, or another clone loaded last) are computed with
        ComfyUI's own `comfy.lora.calculate_weight` from the original weight, one tensor at a time.
        """
        import comfy.lora

        patches = self.patcher.patches
        in_sync = getattr(self.module, "current_weight_patches_uuid", None) == self.patcher.patches_uuid
        backup = getattr(self.patcher, "backup", {})
        for key, tensor in self.module.state_dict().items():
            original = backup[key].weight if key in backup else tensor
            if key not in patches:
                yield key, original
            elif in_sync and key in backup:
                yield key, tensor
            else:
                out = comfy.lora.calculate_weight(patches[key], original.to(torch.float32, copy=True), key)
                yield key, out.to(original.dtype)
