"""The cost of the sequence-parallel exchange on this machine: copying one transformer layer's K and V.

Sequence parallel hands every layer's keys and values to the other GPUs. Between GPUs without peer access
(PCIe without P2P) a tensor goes device -> host memory -> device; with two or more GPUs the direct device ->
device copy is timed too. One GPU has no link to cross: its same-device copy is recorded as an upper bound of
what a link could give, and labelled so.

Shapes come from the transformer config (`Sizes.ltx25_transformer` on the GPU, the tiny model on the CPU):
per layer, K and V of (batch 1, tokens, heads x head_dim) in bf16, for LTX-2.5's stage 1 (half the output size;
LTX-2.5's video attention is 32 heads x 128 = 4096 wide, 48 layers):

* 1080p: 121 frames at 960 x 544 -> 16 x 17 x 30 latent cells = 8,160 tokens: K + V = 134 MB per layer;
* 4K: 121 frames at 1920 x 1088 -> 16 x 34 x 60 = 32,640 tokens: K + V = 535 MB per layer.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from runtime import Records, device, sync
from sizes import Sizes


@dataclass(frozen=True)
class KVSize:
    """One layer's K and V at one resolution."""

    label: str
    tokens: int
    width: int
    layers: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.tokens, self.width)

    @property
    def bytes(self) -> int:
        """K and V together, bf16."""
        return 2 * self.tokens * self.width * 2


def kv_sizes(sizes: Sizes) -> list[KVSize]:
    """Each resolution's per-layer K/V of the transformer `sizes` builds (ComfyUI's LTXAVModel defaults where
    the config does not say: 32 heads x 128, 48 layers)."""
    cfg = sizes.ltx25_transformer
    width = cfg.get("num_attention_heads", 32) * cfg.get("attention_head_dim", 128)
    layers = cfg.get("num_layers", 48)
    return [KVSize(label, frames * height * w, width, layers) for label, (frames, height, w) in sizes.exchange]


def _median_s(fn, repeats: int) -> float:
    """Median wall time of `fn` over `repeats` runs after one warm-up, the device synchronised around each."""
    fn()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _record(rec: Records, name: str, kv: KVSize, seconds: float, equal: bool, **extra: object) -> None:
    rec.add(name, "ok" if equal else "fail", seconds=seconds, gib_per_s=kv.bytes / seconds / 2**30,
            bytes=kv.bytes, shape=list(kv.shape), layers=kv.layers, per_step_s=seconds * kv.layers,
            detail=f"K and V {tuple(kv.shape)} bf16, {kv.bytes / 1e6:,.0f} MB per layer; copies equal the source: "
            f"{equal}; all {kv.layers} layers: {seconds * kv.layers:.3f} s per model call", **extra)


def exchange_cost(rec: Records, sizes: Sizes) -> None:
    """Times one layer's K/V exchange at each resolution of `sizes`: through host memory, and device to device
    (another GPU where there is one, else the same GPU as an upper bound). Every copy is checked equal."""
    dev = device()
    cuda = dev.type == "cuda"
    repeats = 5 if cuda else 2
    gen = torch.Generator(device=dev).manual_seed(7)
    for kv in kv_sizes(sizes):
        k = torch.randn(kv.shape, generator=gen, device=dev, dtype=torch.bfloat16)
        v = torch.randn(kv.shape, generator=gen, device=dev, dtype=torch.bfloat16)
        host = [torch.empty(kv.shape, dtype=torch.bfloat16, pin_memory=cuda) for _ in range(2)]
        back = [torch.empty_like(k) for _ in range(2)]

        def to_host() -> None:
            host[0].copy_(k, non_blocking=cuda)
            host[1].copy_(v, non_blocking=cuda)

        def to_device() -> None:
            back[0].copy_(host[0], non_blocking=cuda)
            back[1].copy_(host[1], non_blocking=cuda)

        d2h, h2d = _median_s(to_host, repeats), _median_s(to_device, repeats)
        _record(rec, f"{kv.label}: device -> host -> device (PCIe without P2P)", kv, d2h + h2d,
                torch.equal(back[0], k) and torch.equal(back[1], v), to_host_s=d2h, to_device_s=h2d,
                pinned=cuda, repeats=repeats)
        if cuda and torch.cuda.device_count() >= 2:
            other = torch.device("cuda", ((dev.index or 0) + 1) % torch.cuda.device_count())
            peer = torch.cuda.can_device_access_peer(dev, other)
            label = f"{kv.label}: {dev} -> {other} ({'peer access' if peer else 'no peer access: the driver stages'})"
            targets = [torch.empty(kv.shape, dtype=torch.bfloat16, device=other) for _ in range(2)]
            bound = False
        else:
            label = f"{kv.label}: same-device copy on {dev} (upper bound: one device, no link crossed)"
            targets = back
            bound = True

        def direct() -> None:
            targets[0].copy_(k, non_blocking=cuda)
            targets[1].copy_(v, non_blocking=cuda)

        seconds = _median_s(direct, repeats)
        _record(rec, label, kv, seconds, torch.equal(targets[0].to(dev), k) and torch.equal(targets[1].to(dev), v),
                upper_bound=bound, repeats=repeats)
        del k, v, host, back, targets
        if cuda:
            torch.cuda.empty_cache()
