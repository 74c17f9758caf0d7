"""The tiled decode of an LTX video latent with a ComfyUI VAE, streamed into one preallocated CPU buffer.

The tiles live on the pixel grid (`tiling.decode_plan`): each tile is decoded by the VAE's decoder
(`ltx.vae.decoder.TiledDecode`: its pixels and the context they need), cropped, moved to system memory once in
the VAE's dtype, processed there as ComfyUI's VAEDecode does, and blended into the output with
`tiling.blend_tiles` (windows that sum to exactly one, applied only where they ramp; fp32; no division). Device
memory is the VAE plus one tile's decode (`TiledDecode.memory`, logged before the decode); the output is
allocated once on the CPU; nothing full-size goes to the GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from ...tiling import Tile, add_tile, blend_tiles
from ...tiling.ranks import ONE_RANK
from ..comfy_internals import DECODE, require
from ..progress import ProgressCallback, check_interrupt, interruptible
from ..errors import VaeDecodeError
from .decoder import prepare_decode
from .devices import DeviceDecodeJob, decode_pool, device_ranks
from .job import DecodeJob, vae_ranks
from .pixels import pixel_bytes, processed
from .settings import DecodeSettings

log = logging.getLogger(__name__)


def decode_tiled(vae: Any, samples: Any, settings: DecodeSettings = DecodeSettings(), *, group: Any = None,
                 progress: ProgressCallback | None = None,
                 devices: tuple[torch.device, ...] | None = None) -> torch.Tensor:
    """Decode a video latent tile by tile into a (batch, frames, height, width, channels) fp32 CPU tensor.

    The one entry point of a tiled decode (the node, the tests and the benchmarks call it). Invariants: the
    result covers every pixel once with window weights summing to one (one tile covering everything returns
    exactly what `vae.decode` returns). The output is allocated once; each tile's decode is the only other
    large allocation. Decode noise of timestep-conditioned VAEs comes from one field seeded by
    `settings.seed`, so overlaps see the same noise. With `group` (a multigpu TDPGroup) the tiles go
    round-robin to its ranks, which send theirs to this rank (the only one holding the frames). With several
    `devices` (this process's, the VAE's first: `ltx.vae.devices`) they go to a replica on each, in contiguous
    shares blended here in tile order, so the result is the one-device decode's bit for bit. Interrupts are
    checked before every tile; `progress(done, total)` is told after each (of every device).
    """
    require(DECODE)
    devices = tuple(devices or ())
    if group is not None and len(devices) > 1:
        raise VaeDecodeError("the decode has both a TDP group (tdp_group) and several devices (device 'all'); use "
                             "one: disconnect tdp_group, or set device to 'default'")
    decode = prepare_decode(vae, samples, settings)  # refuses bad input before any rank is involved
    with decode_pool(devices) as pool:
        return _decode(vae, decode, settings, group, progress, devices, pool)


def _decode(vae: Any, decode: Any, settings: DecodeSettings, group: Any, progress: ProgressCallback | None,
            devices: tuple[torch.device, ...], pool: Any) -> torch.Tensor:
    """`decode_tiled` of a prepared decode, the other devices' tiles run in `pool`."""
    plan = decode.plan.pixels
    n = len(plan.tiles)
    on_devices = len(devices) > 1
    ranks = vae_ranks(group, vae) if group is not None else ONE_RANK
    if on_devices:
        ranks = device_ranks(devices, n, pool, progress)
    lead = (decode.output_shape[0], decode.output_shape[-1])
    memory = decode.memory()
    if ranks is not ONE_RANK and getattr(group, "receives_on_device", False):  # one worker tile at a time
        largest = max(math.prod(t.shape) for t in plan.tiles)
        memory = dataclasses.replace(memory, buffers=memory.buffers + pixel_bytes((*lead, largest), vae.vae_dtype))
    log.info("tiled VAE decode: latent %s -> %s px (frames x height x width), %s tiles; memory: %s",
             tuple(decode.latent.shape), " x ".join(map(str, decode.output_shape[1:4])),
             " x ".join(map(str, plan.counts)), memory.describe())
    images = torch.zeros(decode.output_shape, dtype=torch.float32)
    # blend_tiles sums over trailing (frames, height, width) axes: hand it the channels-first view of the
    # channels-last output, so the result needs no copy to become ComfyUI's IMAGE layout.
    out = images.permute(0, 4, 1, 2, 3)

    def run(rank: int, world: int, before: Callable[[Tile], None], on_tile: Callable[[int, int, Tile], None]):
        with torch.inference_mode():
            return blend_tiles(plan, decode.decode_tile, rank=rank, world=world, out=out, before_tile=before,
                               on_tile=on_tile)

    def add(tile: Tile, raw: torch.Tensor) -> None:  # a tile another rank sent: its raw pixels
        add_tile(out, tile, processed(vae, raw))

    with torch.inference_mode():
        decode.load()  # ComfyUI makes room (for the largest tile, and a noise field drawn on the device) first
    if on_devices:
        job = DeviceDecodeJob(vae, decode.latent, settings, decode.context, decode.noise)
    else:
        job = DecodeJob(decode.latent.detach().to("cpu"), settings, decode.context, decode.noise, lead, vae.vae_dtype)
    with torch.inference_mode():
        ranks.gather(job, interruptible(run, None if on_devices else progress, n), plan, add)
    if ranks is not ONE_RANK:
        check_interrupt()
        if progress is not None:
            progress(n, n)
    return images


def image_batch(frames: torch.Tensor) -> torch.Tensor:
    """(batch, frames, H, W, C) -> ComfyUI IMAGE (batch * frames, H, W, C), as VAEDecode folds video (a view)."""
    return frames.reshape(-1, *frames.shape[-3:])
