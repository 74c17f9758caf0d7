"""The exchange of LTX Sequence Parallel on paper: bytes, link time and compute of LTX-2.5's stage 1 (not a test).

    python bench/sequence/comm.py            # prints the page; --write puts it in bench/results/sequence_comm.md

Pure arithmetic (no torch, no ComfyUI), so anyone gets the same table. The facts it starts from:

* LTX-2.5's transformer as ComfyUI 0.33.0 builds it (`LTXAVModel`'s defaults, which the published checkpoints
  keep): 48 layers; video 32 heads x 128 (inner 4096, the text context projected to 4096); audio 32 heads x 64
  (inner 2048); feed-forwards 4x wide (GELU, not gated). `video_to_audio_attn` takes audio queries and video
  keys, projected from the 4096-wide video tokens to 2048.
* Stage 1 of the official two-stage template renders at half the output size; a latent cell is 32 x 32 px and
  8 frames (the first frame alone): 121 frames -> 16 latent frames; 1920 x 1080 -> 960 x 540 -> 30 x 17 cells
  (540 / 32 rounded up), 3840 x 2160 -> 60 x 34. One token per cell. Audio: 121 latents (25 per second);
  text: 1024 tokens.
* The sequence-parallel design: each device holds N / P of the N video tokens and, in every layer, receives
  the keys and values of the other devices' tokens for the two attentions over video keys (video self-attention
  at width 4096, `video_to_audio_attn` at width 2048): 2 (N - N/P) (4096 + 2048) bytes-per-value bytes per
  layer, bf16 (2 bytes). Text cross-attention is local; the audio stream (121 tokens) runs whole on every device.
  The exchange is not overlapped with compute (each layer waits for its keys and values).
* One step is one model call (cfg 1, the distilled stage 1); cfg > 1 doubles compute and bytes alike.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True)
class Transformer:
    """The sizes that set the exchange and the compute of one layer (LTX-2.5 by default)."""

    layers: int = 48
    video_inner: int = 4096
    audio_inner: int = 2048
    ff_mult: int = 4
    text_tokens: int = 1024
    audio_tokens: int = 121
    bytes_per_value: int = 2


@dataclass(frozen=True)
class Link:
    """A device-to-device path: the bandwidth one device receives at (bytes per second, one direction) and the
    fixed cost of one copy from one peer (seconds: launch, synchronisation, staging)."""

    name: str
    about: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Gpu:
    """A GPU's sustained bf16 throughput on this model's GEMMs and attention (FLOP/s, not the datasheet peak)."""

    name: str
    flops: float


LTX25 = Transformer()
LINKS = (
    Link("NVLink", "NVLink 4 (H100 SXM): 900 GB/s both ways, 450 GB/s one way; 10 us a copy", 450e9, 10e-6),
    Link("PCIe 5 P2P", "PCIe 5.0 x16, peer to peer: ~50 GB/s effective; 10 us a copy", 50e9, 10e-6),
    Link("PCIe 4 P2P", "PCIe 4.0 x16, peer to peer: ~25 GB/s effective; 10 us a copy", 25e9, 10e-6),
    Link("PCIe, no P2P", "PCIe without P2P (consumer cards, most Windows machines): through host memory, two "
         "copies, ~12 GB/s effective per device (the host's bandwidth shared: optimistic at 8); 30 us a copy",
         12e9, 30e-6),
)
COPIES_PER_PEER = 4
"""Copies per layer from each other device: keys and values, for two attentions."""
GPUS = (Gpu("H100 (400 TFLOP/s bf16 sustained, 40% of the 989 dense peak)", 400e12),
        Gpu("RTX 4090 (100 TFLOP/s bf16 sustained, of 165 dense)", 100e12))
RESOLUTIONS = {"1080p": (1920, 1080), "4K": (3840, 2160)}
DEVICE_COUNTS = (2, 4, 8)
FRAMES = 121


def stage1_tokens(width: int, height: int, frames: int = FRAMES) -> int:
    """Video tokens of stage 1 for an output of width x height x frames: half size, 32 px cells (rounded up),
    (frames - 1) / 8 + 1 latent frames."""
    cells = lambda px: -(-(px // 2) // 32)  # noqa: E731 - ceil of half the size in cells
    return ((frames - 1) // 8 + 1) * cells(height) * cells(width)


def bytes_received_per_layer(tokens: int, devices: int, model: Transformer = LTX25) -> float:
    """Bytes one device receives per layer: keys and values of the N - N/P tokens it does not hold, for the
    video self-attention and the audio-to-video-keys attention. Zero on one device."""
    return 2 * (tokens - tokens / devices) * (model.video_inner + model.audio_inner) * model.bytes_per_value


def flops_per_layer(tokens: int, devices: int, model: Transformer = LTX25) -> float:
    """FLOPs one device computes per layer with N / P video tokens (2 per multiply-add): its tokens' share of
    every video projection, feed-forward and attention over all N keys, plus what every device does whole
    (text keys and values, the audio stream)."""
    d, a, t, na = model.video_inner, model.audio_inner, model.text_tokens, model.audio_tokens
    shard, m = tokens / devices, model.ff_mult
    per_video_token = (8 * d * d          # self-attention q, k, v, out
                       + 4 * d * d        # text cross-attention q, out
                       + 4 * m * d * d    # feed-forward in and out
                       + 4 * d * a        # audio-to-video attention: q (4096 -> 2048), out
                       + 4 * d * a        # video-to-audio attention: k, v of the video tokens
                       + 4 * tokens * d   # self-attention over all N keys
                       + 4 * t * d        # text attention
                       + 4 * na * a)      # attention over the audio keys
    per_audio_token = (8 * a * a + 4 * a * a + 4 * m * a * a + 4 * a * a + 4 * a * a
                       + 4 * na * a + 4 * t * a + 4 * tokens * a)
    text_kv = 4 * t * d * d + 4 * t * a * a
    return shard * per_video_token + na * per_audio_token + text_kv


@dataclass(frozen=True)
class Row:
    """One (tokens, devices, link, GPU): per model call (all layers)."""

    tokens: int
    devices: int
    bytes_per_device: float
    exchange_s: float
    compute_s: float
    one_device_s: float

    @property
    def speedup(self) -> float:
        return self.one_device_s / (self.compute_s + self.exchange_s)


def row(tokens: int, devices: int, link: Link, gpu: Gpu, model: Transformer = LTX25) -> Row:
    """A model call on `devices` devices: compute of one device's share plus its exchange (bytes over the link
    and a fixed cost per copy), not overlapped."""
    sent = bytes_received_per_layer(tokens, devices, model) * model.layers
    fixed = (devices - 1) * COPIES_PER_PEER * model.layers * link.latency
    return Row(tokens, devices, sent, sent / link.bandwidth + fixed, flops_per_layer(tokens, devices, model) * model.layers
               / gpu.flops, flops_per_layer(tokens, 1, model) * model.layers / gpu.flops)


def break_even_height(devices: int, link: Link, gpu: Gpu, target: float = 1.0, model: Transformer = LTX25) -> int | None:
    """The smallest 16:9 output height (a multiple of 64 px, 121 frames) from which `devices` devices give at least
    `target` x one device's speed; None when none up to 8K does. The speedup grows with the size (attention's
    compute grows as N squared, the exchange as N), so above this height it keeps paying."""
    for height in range(128, 4352 + 1, 64):
        width = -(-height * 16 // 9)
        if row(stage1_tokens(width, height), devices, link, gpu, model).speedup >= target:
            return height
    return None


def page(model: Transformer = LTX25) -> str:
    """The whole page: bytes per layer and per step, link time against compute, and the break-even sizes."""
    lines = ["# LTX Sequence Parallel: the exchange on paper", "",
             "Made by `python bench/sequence/comm.py --write` (pure arithmetic; its docstring states every "
             "assumption). LTX-2.5 stage 1, 121 frames, bf16, one model call per step (cfg 1), "
             f"{model.layers} layers. Links:", "", *[f"* **{k.name}**: {k.about}" for k in LINKS], "",
             "## Bytes each device receives", "",
             "| output | stage-1 latent tokens | devices | per layer | per step (all layers) |", "|---|---|---|---|---|"]
    for label, (w, h) in RESOLUTIONS.items():
        n = stage1_tokens(w, h)
        for p in DEVICE_COUNTS:
            per_layer = bytes_received_per_layer(n, p, model)
            lines.append(f"| {label} ({w}x{h}) | {n} | {p} | {per_layer / 1e6:.1f} MB | "
                         f"{per_layer * model.layers / 1e9:.2f} GB |")
    for gpu in GPUS:
        lines += ["", f"## Time per step on {gpu.name}", "",
                  "Compute: one device's share of the step; exchange: its bytes over the link; speedup: one "
                  "device's step over (compute + exchange).", "",
                  "| output | devices | compute | " + " | ".join(f"{k.name}: exchange, speedup" for k in LINKS) + " |",
                  "|---|---|---|" + "---|" * len(LINKS)]
        for label, (w, h) in RESOLUTIONS.items():
            n = stage1_tokens(w, h)
            for p in DEVICE_COUNTS:
                rows = [row(n, p, link, gpu, model) for link in LINKS]
                lines.append(f"| {label} | {p} | {rows[0].compute_s * 1e3:.0f} ms | "
                             + " | ".join(f"{r.exchange_s * 1e3:.0f} ms, {r.speedup:.2f}x" for r in rows) + " |")
        lines += ["", "Smallest 16:9 output height (121 frames) from which the exchange pays: break-even (faster than "
                  "one device) / 75 % of the ideal speedup.", "",
                  "| link | " + " | ".join(f"{p} devices" for p in DEVICE_COUNTS) + " |",
                  "|---|" + "---|" * len(DEVICE_COUNTS)]
        for link in LINKS:
            cells = [f"{_px(break_even_height(p, link, gpu, 1.0, model))} / "
                     f"{_px(break_even_height(p, link, gpu, 0.75 * p, model))}" for p in DEVICE_COUNTS]
            lines.append(f"| {link.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _px(height: int | None) -> str:
    if height is None:
        return "never up to 4352p"
    return "any (128p)" if height == 128 else f"{height}p"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write bench/results/sequence_comm.md")
    text = page()
    if parser.parse_args().write:
        (RESULTS / "sequence_comm.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
