"""Replicas: one way to give every worker a copy of a model or a VAE exactly as rank 0 computes with it.

A replica travels as a recipe (what builds the empty module on a worker: `recipe.build(device) -> (module,
home)` and `recipe.wrap(module, device)`, defined next to the job that uses it) plus its weights as ComfyUI
patched them, one broadcast per weight. It is sent again only when `replica_key` changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .settings import TDPGroupError
from .wire import WeightName, byte_count, byte_view

KEY_SAMPLES = 64
"""Tensors whose first values enter a replica key (evenly spaced over the state dict)."""
LOAD_BYTES = 256 * 1024 * 1024
"""A worker loads received weights into its module this many bytes at a time (one big tensor alone)."""


def replica_key(patcher: Any) -> str:
    """Changes whenever the weights computed with change: another module, another set of weight patches
    (ComfyUI gives every new set a new `patches_uuid`, e.g. a LoRA), or weights changed in place (a
    fingerprint of a few values of KEY_SAMPLES tensors, read from the unpatched originals). One key for
    models and VAEs (a VAE's patcher is `vae.patcher`)."""
    module, backup = patcher.model, getattr(patcher, "backup", {})
    sd = module.state_dict()
    keys = list(sd)
    samples = []
    for key in keys[:: max(1, len(keys) // KEY_SAMPLES)]:
        flat = (backup[key].weight if key in backup else sd[key]).detach().reshape(-1)
        if flat.numel():
            samples.append(flat[:: max(1, flat.numel() // 4)][:4].to(device="cpu", dtype=torch.float64))
    digest = hashlib.sha1(torch.cat(samples).numpy().tobytes() if samples else b"").hexdigest()[:16]
    return f"{type(module).__name__}/{id(module):x}/{patcher.patches_uuid}/{len(patcher.patches)}/{len(keys)}/{digest}"


def patched_weights(patcher: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(key, tensor) of the module's state dict with `patcher`'s weight patches applied.

    Weights patched in place for this patcher (ComfyUI keeps the original in `backup`) are taken as they
    are; patches not applied in place (low-VRAM loading, or another clone loaded last) are computed with
    ComfyUI's own `comfy.lora.calculate_weight` from the original weight, one tensor at a time.
    """
    import comfy.lora

    module, patches = patcher.model, patcher.patches
    in_sync = getattr(module, "current_weight_patches_uuid", None) == patcher.patches_uuid
    backup = getattr(patcher, "backup", {})
    for key, tensor in module.state_dict().items():
        original = backup[key].weight if key in backup else tensor
        if key not in patches:
            yield key, original
        elif in_sync and key in backup:
            yield key, tensor
        else:
            out = comfy.lora.calculate_weight(patches[key], original.to(torch.float32, copy=True), key)
            yield key, out.to(original.dtype)


def send_weights(patcher: Any, names: tuple[WeightName, ...], broadcast: Callable[[torch.Tensor], None]) -> None:
    """Rank 0: broadcast the bytes of each weight of `names` (state-dict order; empty ones are not sent)."""
    for (key, dtype, shape), (k, tensor) in zip(names, patched_weights(patcher), strict=True):
        if (k, tensor.dtype, tuple(tensor.shape)) != (key, dtype, shape):
            raise TDPGroupError(f"the weight {key} changed while it was being sent to the worker ranks")
        if tensor.numel():
            broadcast(byte_view(tensor))


def receive_weights(module: torch.nn.Module | None, names: tuple[WeightName, ...],
                    broadcast: Callable[[torch.Tensor], None], comm_device: torch.device, home: torch.device) -> None:
    """A worker's half of `send_weights`: take every weight (even when `module` is None after an error: rank 0
    waits in each broadcast) and load them into `module` (on `home`, assigned) LOAD_BYTES at a time."""
    batch: dict[str, torch.Tensor] = {}
    loaded: set[str] = set()
    batch_bytes = 0
    for i, (key, dtype, shape) in enumerate(names):
        buffer = torch.empty(byte_count(dtype, shape), dtype=torch.uint8, device=comm_device)
        if buffer.numel():
            broadcast(buffer)
        if module is None:
            continue
        batch[key] = buffer.view(dtype).reshape(shape).to(device=home, copy=True)
        batch_bytes += buffer.numel()
        if i + 1 == len(names) or batch_bytes >= LOAD_BYTES:
            result = module.load_state_dict(batch, strict=False, assign=True)
            if result.unexpected_keys:
                raise TDPGroupError(f"the worker's replica has no weights named {', '.join(result.unexpected_keys[:5])}; "
                                    "rank 0 and this worker build different modules (ComfyUI versions differ?)")
            loaded.update(batch)
            batch, batch_bytes = {}, 0
    missing = [k for k in (module.state_dict() if module is not None else {}) if k not in loaded]
    if missing:
        raise TDPGroupError(f"rank 0 sent no weights for {', '.join(missing[:5])} (+{max(len(missing) - 5, 0)} more); "
                            "rank 0 and this worker build different modules (ComfyUI versions differ?)")
