"""Replicas: one way to give every worker a copy of a model or a VAE exactly as rank 0 computes with it.

A replica travels as a recipe (the empty module, built with ComfyUI's own classes) plus the weights as
ComfyUI patched them, in broadcast buckets; it is sent again only when `replica_key` changes.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..ltx.positions import ShiftedGridPatchifier
from .settings import TDPGroupError
from .wire import WeightEntry, dumps, layout, put, unpack

log = logging.getLogger(__name__)

BUCKET_BYTES = 256 * 1024 * 1024
"""Weights travel in broadcasts of at most this many bytes (one tensor larger than this gets its own)."""
KEY_SAMPLES = 64
"""Tensors whose first values enter a replica key (evenly spaced over the state dict)."""


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


def plan_buckets(weights: list[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES
                 ) -> tuple[tuple[WeightEntry, ...], tuple[int, ...]]:
    """Assign every weight a place in a bucket; buckets hold at most `bucket_bytes` (or one big tensor)."""
    entries, sizes = [], [0]
    for key, t in weights:
        (spec,), end = layout([t], sizes[-1])
        if spec.offset > 0 and end > bucket_bytes:
            sizes.append(0)
            (spec,), end = layout([t])
        entries.append(WeightEntry(key, len(sizes) - 1, spec))
        sizes[-1] = end
    return tuple(entries), tuple(sizes) if sizes != [0] else ()


def fill_bucket(bucket: torch.Tensor, index: int, entries: tuple[WeightEntry, ...],
                weights: Iterator[tuple[str, torch.Tensor]]) -> None:
    """Copy the weights of bucket `index` into `bucket`, drawing them from `weights` in state-dict order."""
    for e in entries:
        if e.bucket != index:
            continue
        key, tensor = next(weights)
        if key != e.key or tuple(tensor.shape) != e.spec.shape or tensor.dtype != e.spec.dtype:
            raise TDPGroupError(f"the weight {key} changed while it was being sent to the worker ranks")
        put(bucket, e.spec, tensor)


def receive_weights(module: torch.nn.Module | None, entries: tuple[WeightEntry, ...], sizes: tuple[int, ...],
                    broadcast: Any, comm_device: torch.device, home: torch.device) -> None:
    """A worker's half of a weight transfer: take every bucket (even when `module` is None after an error:
    rank 0 waits in each broadcast) and load it into `module` (tensors copied to `home`, assigned)."""
    loaded: set[str] = set()
    for index, size in enumerate(sizes):
        bucket = torch.empty(size, dtype=torch.uint8, device=comm_device)
        broadcast(bucket)
        if module is None:
            continue
        sd = {e.key: unpack(bucket, e.spec).to(device=home, copy=True) for e in entries if e.bucket == index}
        result = module.load_state_dict(sd, strict=False, assign=True)
        if result.unexpected_keys:
            raise TDPGroupError(f"the worker's replica has no weights named {', '.join(result.unexpected_keys[:5])}; "
                                "rank 0 and this worker build different modules (ComfyUI versions differ?)")
        loaded.update(sd)
    missing = [k for k in (module.state_dict() if module is not None else {}) if k not in loaded]
    if missing:
        raise TDPGroupError(f"rank 0 sent no weights for {', '.join(missing[:5])} (+{max(len(missing) - 5, 0)} more); "
                            "rank 0 and this worker build different modules (ComfyUI versions differ?)")


@dataclass(frozen=True)
class ModelRecipe:
    """A diffusion model's construction config: (class, attributes) of its `model_config`.

    Not the object itself: newer ComfyUI gives model configs a `__getattr__` that answers None for anything
    missing, which breaks plain pickling (`__setstate__` comes back as None).
    """

    config_state: bytes

    @classmethod
    def of(cls, patcher: Any) -> "ModelRecipe":
        config = patcher.model.model_config
        try:
            return cls(dumps((type(config), dict(vars(config)))))
        except Exception as e:  # e.g. custom operations built as local classes
            raise TDPGroupError(f"this model's configuration ({type(config).__name__}) cannot be sent to the "
                                f"worker ranks: {e}") from e

    def build(self, device: torch.device, source_package: str) -> tuple[torch.nn.Module, torch.device]:
        """The empty BaseModel (ComfyUI's own class, TDP's per-tile positions) and where its weights go."""
        from .wire import loads

        cls, attributes = loads(self.config_state, source_package)
        config = cls.__new__(cls)
        config.__dict__.update(attributes)
        model = config.get_model({}, "", device=device).to(device).eval()
        dm = model.diffusion_model
        if hasattr(dm, "patchifier") and not isinstance(dm.patchifier, ShiftedGridPatchifier):
            dm.patchifier = ShiftedGridPatchifier(dm.patchifier)  # what rank 0 applies as an object patch
        return model, device

    def wrap(self, module: torch.nn.Module, device: torch.device) -> Any:
        return module
