"""Model replicas: what rank 0 sends (construction config + weights as ComfyUI patched them), and how a
worker rebuilds the BaseModel from it with ComfyUI's own classes.

A replica is identified by `model_key(patcher)`: the BaseModel's identity plus the patcher's
`patches_uuid` (ComfyUI gives every new set of weight patches a new uuid; clones share it). A LoRA or any
other weight patch added in ComfyUI therefore yields a new key and a new broadcast. Object patches other
than TDP's own, hooks and attention patches from other packs are not replicated (rank 0 warns).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from typing import Any

import torch

from ..ltx.positions import ShiftedGridPatchifier
from .protocol import TensorSpec, WeightEntry, as_bytes
from .settings import TDPGroupError

log = logging.getLogger(__name__)

BUCKET_BYTES = 256 * 1024 * 1024
"""Weights travel in broadcasts of at most this many bytes (one tensor larger than this gets its own)."""


def model_key(patcher: Any) -> str:
    """Changes whenever the weights a sampler would run with change (new model or new weight patches)."""
    model = patcher.model
    return f"{id(model):x}/{patcher.patches_uuid}/{len(patcher.patches)}"


def model_config_bytes(patcher: Any) -> bytes:
    """The `model_config` (comfy.supported_models.*) the BaseModel was built from, as (class, attributes).

    Not the object itself: newer ComfyUI gives model configs a `__getattr__` that answers None for
    anything missing, which breaks plain pickling (`__setstate__` comes back as None).
    """
    config = patcher.model.model_config
    try:
        return pickle.dumps((type(config), dict(vars(config))), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # e.g. custom operations built as local classes
        raise TDPGroupError(f"this model's configuration ({type(config).__name__}) cannot be sent to the worker "
                            f"ranks: {e}") from e


def patched_weights(patcher: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(key, tensor) of the BaseModel's state dict with `patcher`'s weight patches applied.

    Weights patched in place for this patcher (ComfyUI keeps the original in `backup`) are taken as
    they are; patches not applied in place (low-VRAM loading, or another clone loaded last) are computed
    with ComfyUI's own `comfy.lora.calculate_weight` from the original weight.
    """
    import comfy.lora

    model = patcher.model
    in_sync = getattr(model, "current_weight_patches_uuid", None) == patcher.patches_uuid
    backup = getattr(patcher, "backup", {})
    for key, tensor in model.state_dict().items():
        original = backup[key].weight if key in backup else tensor
        if key not in patcher.patches:
            yield key, original
        elif in_sync and key in backup:
            yield key, tensor
        else:
            out = comfy.lora.calculate_weight(patcher.patches[key], original.to(torch.float32, copy=True), key)
            yield key, out.to(original.dtype)


def plan_buckets(weights: list[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES
                 ) -> tuple[tuple[WeightEntry, ...], tuple[int, ...]]:
    """Assign every weight a place in a bucket; buckets hold at most `bucket_bytes` (or one big tensor)."""
    entries, sizes = [], [0]
    for key, t in weights:
        nbytes = t.numel() * t.element_size()
        at = -(-sizes[-1] // 16) * 16
        if at > 0 and at + nbytes > bucket_bytes:
            sizes.append(0)
            at = 0
        entries.append(WeightEntry(key, len(sizes) - 1, TensorSpec(t.dtype, tuple(t.shape), at, nbytes)))
        sizes[-1] = at + nbytes
    if sizes == [0]:
        sizes = []
    return tuple(entries), tuple(sizes)


def fill_bucket(bucket: torch.Tensor, index: int, entries: tuple[WeightEntry, ...],
                weights: Iterator[tuple[str, torch.Tensor]]) -> None:
    """Copy the weights of bucket `index` into `bucket`, drawing them from `weights` in state-dict order
    (so patched weights are computed one at a time, never all at once)."""
    for e in entries:
        if e.bucket != index:
            continue
        key, tensor = next(weights)
        if key != e.key or tuple(tensor.shape) != e.spec.shape or tensor.dtype != e.spec.dtype:
            raise TDPGroupError(f"the model's weight {key} changed while it was being sent to the worker ranks")
        if e.spec.nbytes:
            bucket[e.spec.offset:e.spec.offset + e.spec.nbytes].copy_(as_bytes(tensor))


def broadcast_buckets(session: Any, entries: tuple[WeightEntry, ...], sizes: tuple[int, ...],
                      weights: Iterator[tuple[str, torch.Tensor]], what: str) -> None:
    """Rank 0's half of a weight transfer: fill and broadcast each bucket in turn (one bucket in memory)."""
    for index, size in enumerate(sizes):
        bucket = torch.empty(size, dtype=torch.uint8, device=session.comm_device)
        fill_bucket(bucket, index, entries, weights)
        session.broadcast(bucket, what)
        del bucket


# -- worker side --------------------------------------------------------------------------------------------
def restore_model_config(state: tuple[type, dict[str, Any]]) -> Any:
    """The model config from `model_config_bytes`' (class, attributes), without running its __init__."""
    cls, attributes = state
    config = cls.__new__(cls)
    config.__dict__.update(attributes)
    return config


def build_replica(model_config: Any, device: torch.device) -> Any:
    """An empty BaseModel built by ComfyUI from `model_config`, on `device`, with TDP's patchifier."""
    model = model_config.get_model({}, "", device=device)
    model.to(device)
    model.eval()
    dm = model.diffusion_model
    if hasattr(dm, "patchifier") and not isinstance(dm.patchifier, ShiftedGridPatchifier):
        # Our own replica object: the same per-tile position patch rank 0 applies as an object patch.
        dm.patchifier = ShiftedGridPatchifier(dm.patchifier)
    return model


def load_bucket(model: Any, bucket: torch.Tensor, index: int, entries: tuple[WeightEntry, ...], loaded: set[str]) -> None:
    """Copy the weights of bucket `index` into `model` (keys checked once all buckets are in)."""
    sd = {}
    for e in entries:
        if e.bucket == index:
            sd[e.key] = bucket[e.spec.offset:e.spec.offset + e.spec.nbytes].view(e.spec.dtype).view(e.spec.shape) \
                if e.spec.nbytes else torch.empty(e.spec.shape, dtype=e.spec.dtype)
    result = model.load_state_dict(sd, strict=False)
    if result.unexpected_keys:
        raise TDPGroupError(f"the worker's replica has no weights named {', '.join(result.unexpected_keys[:5])}; "
                            "rank 0 and this worker build different models (ComfyUI versions differ?)")
    loaded.update(sd)


def check_complete(model: Any, loaded: set[str]) -> None:
    missing = [k for k in model.state_dict() if k not in loaded]
    if missing:
        raise TDPGroupError(f"rank 0 sent no weights for {', '.join(missing[:5])} (+{max(len(missing) - 5, 0)} more); "
                            "rank 0 and this worker build different models (ComfyUI versions differ?)")
