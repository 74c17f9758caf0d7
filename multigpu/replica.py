"""Replicas: one way to give every worker a copy of a model or a VAE exactly as rank 0 computes with it.

A replica travels as its source's recipe (pickled with the module's weights left out) plus the weights,
one broadcast each, in state-dict order. It is sent again only when the source's key changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from .settings import TDPGroupError
from .wire import WeightName, byte_count, byte_view

LOAD_BYTES = 256 * 1024 * 1024
"""A worker loads received weights into its module this many bytes at a time (one big tensor alone)."""


def send_weights(weights: Iterator[tuple[str, torch.Tensor]], names: tuple[WeightName, ...],
                 broadcast: Callable[[torch.Tensor], None]) -> None:
    """Rank 0: broadcast the bytes of each weight of `names` (in that order; empty ones are not sent)."""
    for (key, dtype, shape), (k, tensor) in zip(names, weights, strict=True):
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
