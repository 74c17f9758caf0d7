"""A job's large tensors (a decode's latent and noise field), sent after its pickle a chunk at a time, straight
from rank 0's tensors into the workers' (wire: `dumps(band=...)` leaves them out of the pickle, `loads(band=...)`
makes their empty places). Neither side copies them beyond one chunk on the communication device, so a multi-GB
noise field is held once per process, not three or four times as a pickle's bytes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .wire import band_chunks


def send_band(band: list[torch.Tensor], broadcast: Callable[[torch.Tensor], None], device: torch.device) -> int:
    """Rank 0: broadcast every chunk of the tensors of `band`, in order, from `device`; the bytes sent."""
    sent = 0
    for chunk in [c for tensor in band for c in band_chunks(tensor)]:
        broadcast(chunk.to(device))
        sent += chunk.numel()
    return sent


def receive_band(band: list[torch.Tensor], broadcast: Callable[[torch.Tensor], None], device: torch.device) -> None:
    """A worker's half of `send_band`: fill the (empty, contiguous) tensors of `band`, chunk by chunk, received on
    `device` (straight into the tensor where it lives there)."""
    for chunk in [c for tensor in band for c in band_chunks(tensor)]:
        if chunk.device == device:
            broadcast(chunk)
        else:
            held = torch.empty_like(chunk, device=device)
            broadcast(held)
            chunk.copy_(held)
