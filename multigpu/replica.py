"""Replicas: one way to give every worker a copy of a model or a VAE exactly as rank 0 computes with it.

A replica travels as its source's recipe (pickled with the module's weights left out) plus the weights,
one broadcast each, in state-dict order. It is sent again only when the source's key changes.

A worker loads the weights module by module: the entries of one module (for a quantized Linear of ComfyUI:
`weight` codes, `weight_scale`, `comfy_quant`, bias) go into that module alone, together, as soon as the
last of them has arrived. ComfyUI's quantized layers cannot be loaded piecemeal (a load without `weight`
sets it to None, one without `comfy_quant` reads the codes as plain numbers), and a worker holds no more
than one module's received weights besides its replica.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import torch

from .settings import TDPGroupError
from .wire import WeightName, byte_count, byte_view

QUANT_SUFFIX = ".comfy_quant"
"""A state-dict entry naming a layer's quantization format (ComfyUI's JSON bytes); both sides must agree."""


def send_weights(weights: Iterator[tuple[str, torch.Tensor]], names: tuple[WeightName, ...],
                 broadcast: Callable[[torch.Tensor], None]) -> None:
    """Rank 0: broadcast the bytes of each weight of `names` (in that order; empty ones are not sent)."""
    for (key, dtype, shape), (k, tensor) in zip(names, weights, strict=True):
        if (k, tensor.dtype, tuple(tensor.shape)) != (key, dtype, shape):
            raise TDPGroupError(f"the weight {key} changed while it was being sent to the worker ranks")
        if tensor.numel():
            broadcast(byte_view(tensor))


def _owner(key: str) -> str:
    return key.rpartition(".")[0]


def _load_module(module: torch.nn.Module, owner: str, entries: dict[str, torch.Tensor]) -> None:
    """Load `entries` (full keys) into submodule `owner` only (not its children), assigning the tensors."""
    try:
        target = module.get_submodule(owner)
    except AttributeError:
        raise TDPGroupError(f"the worker's replica has no module {owner!r} for {', '.join(list(entries)[:3])}; "
                            "rank 0 and this worker build different modules (ComfyUI versions differ?)") from None
    prefix = f"{owner}." if owner else ""
    missing: list[str] = []
    unexpected: list[str] = []
    errors: list[str] = []
    try:  # what Module.load_state_dict does for each module; here for this one only
        target._load_from_state_dict(dict(entries), prefix, {"assign_to_params_buffers": True}, True,
                                     missing, unexpected, errors)
    except (KeyError, ValueError, RuntimeError) as e:
        raise TDPGroupError(f"this worker cannot load {owner or 'the module'} as rank 0 sent it "
                            f"({_format(entries, owner)}): {type(e).__name__}: {e}") from None
    if unexpected or errors:
        raise TDPGroupError(f"the worker's replica has no weights named {', '.join((unexpected or errors)[:5])}; "
                            "rank 0 and this worker build different modules (ComfyUI versions differ?)")


def _format(entries: dict[str, torch.Tensor], owner: str) -> str:
    """A layer's quantization format in words, from its `comfy_quant` entry (or "not quantized")."""
    q = entries.get(f"{owner}{QUANT_SUFFIX}" if owner else QUANT_SUFFIX[1:])
    return "quantized " + bytes(q.to("cpu").tolist()).decode(errors="replace") if q is not None else "not quantized"


def receive_weights(module: torch.nn.Module | None, names: tuple[WeightName, ...],
                    broadcast: Callable[[torch.Tensor], None], comm_device: torch.device, home: torch.device) -> None:
    """A worker's half of `send_weights`: take every weight (even when `module` is None after an error: rank 0
    waits in each broadcast) and load them into `module` (on `home`, assigned) module by module. Then check
    that the module holds exactly the weights sent, each layer in rank 0's quantization format."""
    last = {_owner(key): i for i, (key, _, _) in enumerate(names)}
    pending: dict[str, dict[str, torch.Tensor]] = {}
    formats: dict[str, bytes] = {}
    for i, (key, dtype, shape) in enumerate(names):
        buffer = torch.empty(byte_count(dtype, shape), dtype=torch.uint8, device=comm_device)
        if buffer.numel():
            broadcast(buffer)
        if module is None:
            continue
        owner = _owner(key)
        pending.setdefault(owner, {})[key] = buffer.view(dtype).reshape(shape).to(device=home, copy=True)
        if key.endswith(QUANT_SUFFIX):
            formats[key] = bytes(buffer.to("cpu").tolist())
        if last[owner] == i:
            _load_module(module, owner, pending.pop(owner))
    if module is not None:
        check_replica(module, names, formats)


def check_replica(module: torch.nn.Module, names: tuple[WeightName, ...], formats: dict[str, bytes]) -> None:
    """Raise TDPGroupError unless `module`'s state dict has exactly the keys, dtypes and shapes of `names` and
    every `comfy_quant` entry equals rank 0's (`formats`): rank 0 and this worker compute with the same
    weights, every layer in the same quantization format."""
    held = module.state_dict()
    sent = {k: (d, s) for k, d, s in names}
    unsent = [k for k in held if k not in sent]
    if unsent:
        raise TDPGroupError(f"rank 0 sent no weights for {', '.join(unsent[:5])} (+{max(len(unsent) - 5, 0)} more); "
                            "rank 0 and this worker build different modules (ComfyUI versions differ?)")
    for key, (dtype, shape) in sent.items():
        layer = _owner(key)
        want = formats.get(f"{layer}{QUANT_SUFFIX}", b"not quantized").decode(errors="replace")
        if key not in held:
            raise TDPGroupError(f"layer {layer}: rank 0 computes with it ({want}) but this worker lost its {key} "
                                "while loading; the group would compute with different weights")
        got = held[key]
        if key in formats:
            got_format = bytes(got.to("cpu").tolist()).decode(errors="replace")
            if json.loads(got_format) != json.loads(want):
                raise TDPGroupError(f"layer {layer}: rank 0 computes with format {want}, this worker with "
                                    f"{got_format}; rank 0 and the workers must load the same quantization")
        elif (got.dtype, tuple(got.shape)) != (dtype, shape):
            raise TDPGroupError(f"layer {layer}: rank 0 computes with {key} as {dtype} {list(shape)} ({want}), "
                                f"this worker with {got.dtype} {list(got.shape)}; rank 0 and the workers must load "
                                "the same quantization")
