"""What a tiled decode holds on the GPU, by the pack's own accounting (`DecodeMemory`), and how the two decoders'
working sets are counted.

A decode's device memory is the VAE's weights plus, at any time, either what it draws there before its first tile
(LTX-2.5's noise field, then moved to system memory) or the largest tile's decode (the decoder's working set) plus
the buffers the pack keeps beside it. The output frames (fp32) are system memory. Every count is in tensors of the
size the decoder's own code allocates, read from the decoder's layers at the largest tile's shape:

* LTX's conv decoders (`conv_working_set`): ComfyUI runs the up blocks one after another; from 0.8 on it streams
  time, cutting a level's output into chunks of at most `get_max_chunk_size(device)` bytes (whole frames), and a
  chunked level stays alive while its chunks run through the levels below it. A block holds CONV_TENSORS tensors of
  its larger side (input, time-padded copy, convolution output, normalised copy), the last stage the pixels twice
  more (the output convolution and its unpatchified copy). ComfyUI 0.3.x does not stream: every level is whole.
* LTX-2.5's diffusion decoder (`na_tensors`): a neighbourhood-attention block holds its input, q, k, v and the
  attention output (NA_TENSORS tensors of its width per position; ComfyUI streams the MLP and the projections in
  bounded slices), an upsampler its input and output. Stage 5 adds the context and the pixel-sized tensors (the
  noise slice, its patchified copy, the output and its unpatchified copy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

CONV_TENSORS = 4
"""Tensors of a level's size alive while one of ComfyUI's conv decoder blocks runs on it."""
NA_TENSORS = 5
"""Tensors of a stage's width per position alive while a neighbourhood-attention block runs (x, q, k, v, out)."""
PIXEL_TENSORS = 4
"""Pixel-sized tensors (in the VAE's dtype) alive in stage 5 beside its blocks: noise slice, patchified copy,
output, unpatchified output."""


@dataclass(frozen=True)
class DecodeMemory:
    """A tiled decode's memory by the pack's accounting, in bytes. Invariant: `device_peak` bounds what the decode
    holds on the VAE's device at any time (tests/ltx/vae/test_decode_memory.py checks it with a live-tensor
    meter); `host` is system memory."""

    weights: int
    """The VAE's weights on its device (ComfyUI loads them whole for a decode)."""
    tile: int
    """The largest tile's decode: the decoder's working set."""
    buffers: int
    """What the pack keeps on the device beside a tile's decode (the decoded block before its crop is copied out,
    LTX-2.5's stages 1-3 of the chunk, a receive buffer of a group)."""
    draw: int = 0
    """What the decode draws on the device before its first tile, then moves to system memory (LTX-2.5's noise
    field, one of ComfyUI's batch parts)."""
    host: int = 0
    """System memory the decode allocates: the fp32 output frames (and LTX-2.5's noise field)."""

    @property
    def work(self) -> int:
        """What the decode asks ComfyUI to leave free beside the weights (`load_models_gpu(memory_required=...)`)."""
        return max(self.draw, self.tile + self.buffers)

    @property
    def device_peak(self) -> int:
        return self.weights + self.work

    def describe(self) -> str:
        gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
        draw = f", the noise draw {gib(self.draw)} before it" if self.draw else ""
        return (f"GPU {gib(self.device_peak)} (VAE weights {gib(self.weights)} + the largest tile's decode "
                f"{gib(self.tile)} + the pack's buffers {gib(self.buffers)}{draw}); system memory {gib(self.host)}")


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def frames_and_tile_bytes(output_shape: tuple[int, ...], plan: Any, itemsize: int, decoded_on_host: bool) -> int:
    """System memory of a decode's fp32 output frames (batch, frames, height, width, channels), plus its largest
    tile there: its crop copied out in the VAE's dtype (`itemsize` bytes a value; none when the decoder left the
    block in system memory and the one tile is all of it) and cast to fp32 (none for an fp32 VAE)."""
    batch, channels = output_shape[0], output_shape[-1]
    tile = batch * channels * max(math.prod(t.shape) for t in plan.pixels.tiles)
    copies = (itemsize if len(plan.pixels.tiles) > 1 or not decoded_on_host else 0) + (4 if itemsize != 4 else 0)
    return 4 * math.prod(output_shape) + tile * copies


def conv_levels(decoder: torch.nn.Module, block: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(channels, frames, positions per frame) of each level of ComfyUI's LTX conv `decoder` for a latent `block`
    (batch, channels, frames, height, width): conv_in's output, then each up block's."""
    _, _, t, h, w = block
    channels = int(decoder.conv_in.out_channels)
    levels = [(channels, t, h * w)]
    for up in decoder.up_blocks:
        stride = getattr(up, "stride", None)
        if stride is not None and hasattr(up, "out_channels_reduction_factor"):  # DepthToSpaceUpsample
            channels = int(up.out_channels) // math.prod(stride)  # in time it drops its first output frame
            t, h, w = t * stride[0] - (stride[0] - 1), h * stride[1], w * stride[2]
        elif hasattr(up, "out_channels"):  # a channel-changing resnet block
            channels = int(up.out_channels)
        levels.append((channels, t, h * w))
    return levels


def conv_working_set(decoder: torch.nn.Module, block: tuple[int, ...], itemsize: int, chunk: float) -> int:
    """Bytes ComfyUI's LTX conv `decoder` holds at once while it decodes a latent `block` in `itemsize`-byte values,
    streaming time in chunks of at most `chunk` bytes (math.inf: no streaming); the module docstring's rule. The
    output buffer is not included (it is ComfyUI's, or the pack's, `ConvDecode.block_buffer_bytes`)."""
    batch = block[0]
    latent = 2 * math.prod(block) * itemsize  # the block and its un-normalised copy
    levels = conv_levels(decoder, block)
    held, frames, peak = 0, levels[0][1], 0
    current = batch * levels[0][0] * levels[0][2] * frames * itemsize
    peak = latent + CONV_TENSORS * current
    for (c0, t0, _), (c1, t1, p1) in zip(levels, levels[1:]):
        frames_out = -(-frames * t1 // t0)
        out = batch * c1 * p1 * frames_out * itemsize
        peak = max(peak, held + CONV_TENSORS * max(current, out))
        if out > chunk and frames_out > 1:
            pieces = min(frames_out, -(-out // int(chunk)))
            held += out
            frames = -(-frames_out // pieces)
            current = batch * c1 * p1 * frames * itemsize
        else:
            current, frames = out, frames_out
    pixels = batch * int(decoder.conv_out.out_channels) * levels[-1][2] * frames * itemsize  # channels x patch^2
    return max(peak, held + CONV_TENSORS * current + 2 * pixels)


def conv_chunk_bytes(model: Any, device: torch.device, device_memory: int | None = None) -> float:
    """The chunk ComfyUI's LTX conv decoder streams time in on `device` (`get_max_chunk_size`), or on a device of
    `device_memory` bytes (ComfyUI's constants: the smallest chunk up to MIN_VRAM_FOR_CHUNK_SCALING, the largest
    from MAX_VRAM_FOR_CHUNK_SCALING, linear between); math.inf for a ComfyUI whose decoder does not stream (0.3.x:
    no `comfy_has_chunked_io`)."""
    if not getattr(model, "comfy_has_chunked_io", False):
        return math.inf
    from comfy.ldm.lightricks.vae import causal_video_autoencoder as cva

    if device_memory is None:
        return float(cva.get_max_chunk_size(device))
    low, high = cva.MIN_VRAM_FOR_CHUNK_SCALING, cva.MAX_VRAM_FOR_CHUNK_SCALING
    share = min(max((device_memory - low) / (high - low), 0.0), 1.0)
    return float(int(cva.MIN_CHUNK_SIZE + share * (cva.MAX_CHUNK_SIZE - cva.MIN_CHUNK_SIZE)))


def na_tensors(positions: int, width: int) -> int:
    """Values a neighbourhood-attention block of `width` channels holds at once over `positions` positions."""
    return NA_TENSORS * width * positions


def upsample_values(positions_in: int, width_in: int, positions_out: int, width_out: int) -> int:
    """Values a linear pixel-shuffle upsampler holds at once: its input and its output."""
    return positions_in * width_in + positions_out * width_out


def _span_positions(spans: list[Any]) -> int:
    return math.prod(hi - lo + 1 for lo, hi in spans)


def diffusion_memory(decode: Any) -> DecodeMemory:
    """The accounting of an `ltx.vae.diffusion.DiffusionDecode` (module docstring's rule), over its tiles: the head
    (stages 1-3 over the whole frame of a temporal chunk) while it runs and as it is kept, each tile's stages 4-5
    beside it, and the noise field drawn on the device when no rank gave it."""
    vae, layers = decode.vae, decode.layers
    itemsize = torch.empty((), dtype=vae.vae_dtype).element_size()
    widths, pixel_channels = layers.channels[:-1], layers.channels[-1]
    batch, frames, area = decode.latent.shape[0], decode.cells[0], decode.cells[1] * decode.cells[2]
    split = layers.split
    head_peak = head_kept = tile_work = 0
    for tile in decode.plan.pixels.tiles:
        spans = decode.spans(tile)
        lo, hi = spans[0][0]
        positions = (hi - lo + 1 + (layers.pad if hi == frames - 1 else 0)) * area
        peak = positions * widths[0]
        for stage in range(split):
            peak = max(peak, na_tensors(positions, widths[stage]))
            if stage < split - 1:
                grown = positions * math.prod(layers.strides[stage])
                peak = max(peak, upsample_values(positions, widths[stage], grown, widths[stage + 1]))
                positions = grown
        head_peak, head_kept = max(head_peak, peak), max(head_kept, positions * widths[split - 1])
        positions = _span_positions([s[1] for s in spans])  # stage 3's output the tile reads
        mid = 0
        for stage in range(split - 1, len(layers.depths)):
            if stage >= split:
                mid = max(mid, na_tensors(positions, widths[stage]))
            grown = positions * math.prod(layers.strides[stage])
            mid = max(mid, upsample_values(positions, widths[stage], grown, widths[stage + 1]))
            positions = grown
        stage5 = _span_positions([s[2] for s in spans])
        tail = positions * widths[-1] + na_tensors(stage5, widths[-1]) + PIXEL_TENSORS * stage5 * pixel_channels
        if layers.steps > 1:  # velocities and the next x_t in fp32
            tail += 3 * stage5 * pixel_channels * 4 // itemsize
        tile_work = max(tile_work, mid, tail)
    noise = batch * pixel_channels // layers.patch ** 2 * math.prod(decode.output_shape[1:4]) * itemsize
    on_host = torch.device(vae.device).type == "cpu"
    host = frames_and_tile_bytes(decode.output_shape, decode.plan, itemsize, on_host) + noise
    return DecodeMemory(module_bytes(vae.first_stage_model), batch * itemsize * max(head_peak - head_kept, tile_work),
                        batch * itemsize * head_kept, noise if decode.noise is None else 0, host)
