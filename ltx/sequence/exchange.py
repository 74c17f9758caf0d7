"""The all-gather between the device threads of one model call (one process, no NCCL).

Each rank puts its tensors in its slot, waits at a barrier until every rank has, and copies every slot to its
own device (`Tensor.to`: a peer copy between GPUs, through host memory where there is no P2P). Slots alternate
between two generations, so one barrier per gather suffices: a rank writes generation g + 2 only after every
rank has passed gather g + 1, i.e. has read generation g.

On GPUs the copy needs no extra synchronisation: torch copies between devices on the source device's current
stream and makes the destination's current stream wait for it; a device's current stream is its default stream,
the one every thread computes on (ComfyUI runs the model there), so the copy comes after the kernels that made
the tensor. A slot keeps its tensors referenced until its next generation, so their memory is not reused while
another rank may still copy them.

A rank that fails or is cancelled calls `abort`: every rank waiting at the barrier, or arriving later, raises
`ExchangeAborted`, which `DeviceRanks` takes as "stopped by another device" (not a failure of its own).

A rank whose share returns normally calls `leave`. A rank that returns without
joining a gather the others reach (something on the model skipped the blocks on one device: a diffusion-model wrapper
that returns early, as EasyCache's skip does when it runs per shard) would leave them waiting for ever; instead every
rank waiting for such a gather, now or later, raises `ExchangeDeserted`, an error of its own naming the cause, so
the call fails at once and ComfyUI takes the next prompt.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from ..device_ranks import Stopped


def bytes_per_layer(tokens: int, shard: int, batch: int, element_size: int, widths: Sequence[int]) -> int:
    """Bytes one device receives per transformer block: the keys and values (2 x width each) of the other
    devices' `tokens - shard` video tokens, for every attention over video keys of the block (`widths`: LTXV and
    LTX-2.5 video self-attention's; LTX-2 adds video_to_audio_attn's, the audio attention width)."""
    return (tokens - shard) * batch * element_size * sum(2 * w for w in widths)


class ExchangeAborted(Stopped):
    """Another rank of this exchange failed or was cancelled; this rank stops."""


class ExchangeDeserted(RuntimeError):
    """A rank of this exchange returned from the model without joining a gather this rank waits for."""


class AllGather:
    """An all-gather of tensor tuples among `ranks` threads, each on its own device."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self._barrier = threading.Barrier(ranks)
        self._slots: list[list[tuple[torch.Tensor, ...] | None]] = [[None] * ranks, [None] * ranks]
        self._generation = [0] * ranks
        self._left: list[int | None] = [None] * ranks
        self._deserted: str | None = None
        self._lock = threading.Lock()
        self.bytes_received = [0] * ranks

    def abort(self) -> None:
        """Release every rank waiting now or later: they raise ExchangeAborted."""
        self._barrier.abort()

    def leave(self, rank: int) -> None:
        """`rank` has returned from the model call, having joined every gather it will. If another rank already
        waits for a gather `rank` never joined, that rank and every later one raise ExchangeDeserted at once."""
        with self._lock:
            self._left[rank] = self._generation[rank]
            if max(self._generation) > self._generation[rank]:
                self._desert(rank, max(self._generation))

    def _desert(self, rank: int, waited: int) -> None:
        """Release every rank (the lock held): `rank` left after fewer gathers than `waited`."""
        if self._deserted is None:
            self._deserted = (
                f"rank {rank} of this model call's {self.ranks} video shards returned from the model after "
                f"{self._left[rank]} of its exchanges while another shard waited for exchange {waited}: something on "
                "the model skipped the transformer blocks on one device only (a diffusion-model wrapper that returns "
                "early, e.g. a step cache that runs once per shard), so the shards can never meet again")
        self._barrier.abort()

    def gather(self, rank: int, parts: Sequence[torch.Tensor], dim: int) -> tuple[torch.Tensor, ...]:
        """Every rank's `parts`, each concatenated along `dim` in rank order, on this rank's device. Every rank
        of the exchange must call it the same number of times (a collective)."""
        with self._lock:
            slots = self._slots[self._generation[rank] % 2]
            self._generation[rank] += 1
            slots[rank] = tuple(parts)
            gone = [r for r, joined in enumerate(self._left) if joined is not None and joined < self._generation[rank]]
            if gone:
                self._desert(gone[0], self._generation[rank])
        if self.ranks > 1:
            try:
                self._barrier.wait()
            except threading.BrokenBarrierError:
                if self._deserted is not None:
                    raise ExchangeDeserted(self._deserted) from None
                raise ExchangeAborted() from None
        device = parts[0].device
        out = []
        for i in range(len(parts)):
            pieces = [slot[i] if r == rank else slot[i].to(device) for r, slot in enumerate(slots)]
            self.bytes_received[rank] += sum(p.numel() * p.element_size() for r, p in enumerate(pieces) if r != rank)
            out.append(torch.cat(pieces, dim=dim))
        return tuple(out)
