"""Tiled decode of an LTX video latent with a ComfyUI VAE, streamed into one preallocated CPU buffer.

The tiles live on the pixel grid (`tiling.vae_axes.plan_vae_decode`): each tile decodes the latent cells
its pixels need plus a context margin, is cropped back to its pixels and blended into the output with
`tiling.blend_tiles` (windows that sum to exactly one; fp32; no division). Peak memory is one tile's
decode plus the output, which is allocated once on the CPU; nothing full-size goes to the GPU.

With a context of at least the decoder's reach (`decoder_reach`, the "exact" quality preset) a tile's
crop equals the untiled decode up to float rounding: LTX decoders have no layer that mixes the whole
frame (`ltx.vae_reach`). The node picks the context through `QUALITY_PRESETS`; `decode_tiled`'s own
keyword defaults (context 1) are those of direct callers and multi-GPU messages, not the node's.

Timestep-conditioned LTX VAEs add decode noise (`randn * s + (1 - s) * latent`) inside
`VideoVAE.decode`, unseeded, so two tiles would see different noise in their overlap. Here the noise is
drawn once for the whole latent from a seeded generator, sliced per tile, and the decoder is called
below the noise step (`decoder(per_channel_statistics.un_normalize(x), timestep=...)`), with the noise
scale and timestep this ComfyUI's VideoVAE uses (`decode_noise_scale` / `decode_timestep` attributes in
current ComfyUI, the `noise_scale` / `timestep` defaults of `decode` in 0.3.x).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..tiling import AxisTileSize, Tile, blend_tiles
from ..tiling.seam import LOCAL, BeforeTile, TileGroup
from ..tiling.vae_axes import AxisScale, DecodeSource, VaeDecodePlan, plan_vae_decode
from .vae_reach import counted_reach, whole_frame_layers

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): tiles of the whole decode done, after each tile this process decodes."""

DEFAULT_SPATIAL_CONTEXT = 1
"""Extra latent cells (32 px each) every tile decodes beyond its pixels on each side of height and width,
when a caller names no context (the node's `context_cells` default for the "custom" quality)."""

DEFAULT_TEMPORAL_CONTEXT = 1
"""Extra latent frames (8 frames each) every tile decodes beyond its frames, before and after."""


class VaeDecodeError(ValueError):
    """A latent or VAE the tiled decode cannot take. The message is written for a ComfyUI user."""


def video_latent(samples: Any) -> torch.Tensor:
    """The video part of LATENT["samples"]: the tensor itself, or `.tensors[0]` of an LTX-2 audio+video
    NestedTensor. Raises VaeDecodeError unless the result is a 5-D (batch, channels, frames, height, width)."""
    if getattr(samples, "is_nested", False) and isinstance(getattr(samples, "tensors", None), (list, tuple)):
        samples = samples.tensors[0]
    if not isinstance(samples, torch.Tensor):
        raise VaeDecodeError(f"the latent holds a {type(samples).__name__}, not a tensor")
    if samples.ndim != 5:
        kind = "an image latent" if samples.ndim == 4 else f"a {samples.ndim}-D latent"
        raise VaeDecodeError(
            f"the tiled video decode needs a video latent (batch, channels, frames, height, width); got "
            f"{kind} of shape {tuple(samples.shape)}"
        )
    return samples


def vae_scales(vae: Any) -> tuple[AxisScale, AxisScale, AxisScale]:
    """(frames, height, width) pixel scales of an LTX video VAE, read from its `upscale_ratio`.

    Raises VaeDecodeError for an empty VAE, a VAE that is not ComfyUI's LTX VideoVAE, or scale factors
    that are not (causal or plain time factor, height factor, width factor).
    """
    model = getattr(vae, "first_stage_model", None)
    if model is None:
        raise VaeDecodeError("the VAE is empty: its file held no VAE weights")
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    if not isinstance(model, VideoVAE):
        raise VaeDecodeError(
            f"the tiled decode needs an LTX video VAE (LTX-Video or LTX-2); this VAE is a {type(model).__name__}"
        )
    ratio = getattr(vae, "upscale_ratio", None)
    if not (isinstance(ratio, (tuple, list)) and len(ratio) == 3 and callable(ratio[0])):
        raise VaeDecodeError(f"the VAE's scale factors {ratio!r} are not (time, height, width) video factors")
    time = _time_scale(ratio[0])
    if time is None or not all(isinstance(r, int) and r >= 1 for r in ratio[1:]):
        raise VaeDecodeError(
            f"the VAE maps 1, 2, 3 latent frames to {[ratio[0](n) for n in (1, 2, 3)]} frames and space by "
            f"x{ratio[1]}, x{ratio[2]}; the tiled decode knows only whole factors (time causal or plain)"
        )
    return time, AxisScale(ratio[1]), AxisScale(ratio[2])


def _time_scale(frames_for: Callable[[int], int]) -> AxisScale | None:
    counts = [int(frames_for(n)) for n in range(1, 6)]
    factor = counts[1] - counts[0]
    for scale in (AxisScale(factor, causal=True), AxisScale(factor)) if factor >= 1 else ():
        if counts == [scale.pixel_length(n) for n in range(1, 6)]:
            return scale
    return None


def decoder_reach(vae: Any) -> tuple[int, int]:
    """(time, space) context in latent cells that makes a tile exact: the decoder's reach, counted over its
    kernels, paddings and upsamplers (`ltx.vae_reach.counted_reach`; the tests check it against gradients).

    A tile decoded with at least this many latent cells of context on every side has the same pixels in
    its crop as the untiled decode up to float rounding, unless the decoder has a layer that mixes the
    whole frame (`ltx.vae_reach.whole_frame_layers`), which no finite context makes exact.
    """
    reach = counted_reach(vae.first_stage_model.decoder)
    return reach.time.context, reach.space.context


@dataclass(frozen=True)
class QualityPreset:
    """A named context for the tiled decode: `context` latent cells in space and time, None for the reach."""

    name: str
    context: int | None
    description: str


QUALITY_PRESETS: tuple[QualityPreset, ...] = (
    QualityPreset("exact", None, "context = the decoder's reach, read from its layers (LTX-2: 16 cells in space, "
                  "14 latent frames in time): tiles equal the untiled decode up to float rounding"),
    QualityPreset("high", 8, "8 cells of context: 85 dB"),
    QualityPreset("balanced", 6, "6 cells of context: 62 dB"),
    QualityPreset("fast", 4, "4 cells of context: 45 dB"),
    QualityPreset("custom", -1, "context_cells cells of context in space and time"),
)
"""The node's quality choices, best first. Their dB: PSNR against the untiled decode of the real-configuration
LTX-2 decoder with random weights, 640 x 128 px with one tile border across it (bench/bench_vae_decode.py)."""

DEFAULT_QUALITY = "exact"


def preset_context(vae: Any, quality: str, context_cells: int = DEFAULT_SPATIAL_CONTEXT) -> tuple[int, int]:
    """(spatial_context, temporal_context) in latent cells for quality preset `quality`.

    "exact" is the decoder's reach (`decoder_reach`); a fixed preset never exceeds the reach on an axis
    (more context changes nothing); "custom" is `context_cells` on both axes. Raises VaeDecodeError for an
    unknown preset name.
    """
    preset = {p.name: p for p in QUALITY_PRESETS}.get(quality)
    if preset is None:
        raise VaeDecodeError(f"unknown decode quality {quality!r}; expected one of "
                             f"{', '.join(p.name for p in QUALITY_PRESETS)}")
    if preset.context == -1:
        return int(context_cells), int(context_cells)
    time_reach, space_reach = decoder_reach(vae)
    mixing = whole_frame_layers(vae.first_stage_model.decoder)
    if mixing and preset.context is None:
        log.warning("this VAE's decoder has layers that mix the whole frame (%s): no finite context makes tiles "
                    "exact; using its convolutional reach", ", ".join(mixing[:3]))
    if preset.context is None:
        return space_reach, time_reach
    return min(preset.context, space_reach), min(preset.context, time_reach)


def plan_decode(
    latent_shape: tuple[int, int, int],
    scales: tuple[AxisScale, AxisScale, AxisScale],
    spatial_tile: int,
    spatial_overlap: int,
    temporal_tile: int,
    temporal_overlap: int,
    spatial_context: int = DEFAULT_SPATIAL_CONTEXT,
    temporal_context: int = DEFAULT_TEMPORAL_CONTEXT,
) -> VaeDecodePlan:
    """The tile plan of a decode: tiles and overlaps in pixels / frames, context in latent cells.

    Raises tiling.TilingError (in pixel units) for a tile not longer than twice its overlap, or any
    layout whose windows would not sum to exactly one.
    """
    return plan_vae_decode(
        latent_shape,
        tiles=(AxisTileSize(temporal_tile, temporal_overlap), AxisTileSize(spatial_tile, spatial_overlap),
               AxisTileSize(spatial_tile, spatial_overlap)),
        context=(temporal_context, spatial_context, spatial_context),
        scales=scales,
    )


DECODE_SETTINGS = ("spatial_tile", "spatial_overlap", "temporal_tile", "temporal_overlap", "spatial_context",
                   "temporal_context", "seed")
"""The keyword settings of `decode_tiled` that fix its result (what a multi-GPU decode sends every rank)."""


def decode_layout(
    vae: Any,
    samples: Any,
    *,
    spatial_tile: int = 768,
    spatial_overlap: int = 64,
    temporal_tile: int = 80,
    temporal_overlap: int = 24,
    spatial_context: int = DEFAULT_SPATIAL_CONTEXT,
    temporal_context: int = DEFAULT_TEMPORAL_CONTEXT,
    seed: int = 0,
) -> tuple[torch.Tensor, VaeDecodePlan, tuple[int, ...]]:
    """(video latent, tile plan, output shape (batch, frames, height, width, channels)) of a `decode_tiled`
    call with these settings, checked as `decode_tiled` checks them, without decoding anything.

    Takes every setting of DECODE_SETTINGS (`seed` changes no layout). Raises VaeDecodeError or
    tiling.TilingError for a latent, VAE or layout the decode refuses.
    """
    latent = video_latent(samples)
    scales = vae_scales(vae)
    channels = getattr(vae, "latent_channels", None)
    if channels is not None and latent.shape[1] != channels:
        raise VaeDecodeError(
            f"the latent has {latent.shape[1]} channels but this VAE decodes {channels}-channel latents; "
            f"connect the VAE that belongs to the model that made the latent"
        )
    plan = plan_decode(tuple(latent.shape[2:]), scales, spatial_tile, spatial_overlap, temporal_tile,
                       temporal_overlap, spatial_context, temporal_context)
    out_channels = int(getattr(vae, "output_channels", 3))
    return latent, plan, (latent.shape[0], *plan.pixel_shape, out_channels)


class TiledDecode:
    """One prepared tiled decode: its plan, its output shape and the decode of any one of its tiles.

    Built by `prepare_decode`, which has checked the latent, the VAE and the layout and drawn the decode
    noise field. `decode_tile(tile)` returns tile `tile` of `plan.pixels` as processed pixels (after
    `vae.process_output`), unweighted, shaped (batch, channels, *tile.shape), on the compute device; the
    window-weighted sum of every tile's result is the tiled decode (`decode_tiled`). The VAE is loaded on
    its device at the first tile.
    """

    def __init__(self, vae: Any, source: torch.Tensor, plan: VaeDecodePlan, output_shape: tuple[int, ...],
                 timestep_conditioned: bool, timestep: float):
        self.vae = vae
        self.source = source
        self.plan = plan
        self.output_shape = output_shape
        self.scales = plan.scales
        self.timestep_conditioned = timestep_conditioned
        self.timestep = timestep
        self._loaded = False

    def load(self) -> None:
        """Load the VAE on its device with room for the largest tile (ComfyUI's model management)."""
        import comfy.model_management as mm

        vae = self.vae
        largest = (self.source.shape[0], self.source.shape[1], *self.plan.largest_source())
        mm.load_models_gpu([vae.patcher], memory_required=vae.memory_used_decode(largest, vae.vae_dtype),
                           force_full_load=bool(getattr(vae, "disable_offload", False)))
        self._loaded = True

    def decode_tile(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s processed pixels (batch, channels, *tile.shape), unweighted, on the compute device."""
        import comfy.model_management as mm

        if not self._loaded:
            self.load()
        vae, src = self.vae, self.plan.source(tile)
        device_context = getattr(mm, "cuda_device_context", None)
        with torch.inference_mode():
            with device_context(vae.device) if device_context is not None else contextlib.nullcontext():
                block = _decode_block(vae, self.source[(Ellipsis, *src.latent)], self.timestep_conditioned,
                                      self.timestep)
            _check_block(block, src, self.scales)
            return vae.process_output(block[(Ellipsis, *src.crop)].float())


def prepare_decode(
    vae: Any,
    samples: Any,
    *,
    spatial_tile: int = 768,
    spatial_overlap: int = 64,
    temporal_tile: int = 80,
    temporal_overlap: int = 24,
    spatial_context: int = DEFAULT_SPATIAL_CONTEXT,
    temporal_context: int = DEFAULT_TEMPORAL_CONTEXT,
    seed: int = 0,
) -> TiledDecode:
    """A `TiledDecode` for these settings (every name of DECODE_SETTINGS): checked and planned, nothing decoded.

    Decode noise of timestep-conditioned VAEs is drawn here once for the whole latent from `seed`, so every
    tile (on any rank) slices the same field. Raises VaeDecodeError or tiling.TilingError like `decode_tiled`.
    """
    latent, plan, shape = decode_layout(
        vae, samples, spatial_tile=spatial_tile, spatial_overlap=spatial_overlap, temporal_tile=temporal_tile,
        temporal_overlap=temporal_overlap, spatial_context=spatial_context, temporal_context=temporal_context)
    model = vae.first_stage_model
    timestep_conditioned, noise_scale, timestep = _decode_noise(model)
    if any(getattr(m, "inject_noise", False) for m in model.decoder.modules()):
        log.warning("this VAE's decoder injects its own unseeded noise inside its blocks; tile overlaps will "
                    "not see identical noise there")
    with torch.inference_mode():
        source = latent.detach().to(device="cpu")
        if timestep_conditioned:
            gen = torch.Generator(device="cpu").manual_seed(int(seed))
            noise = torch.randn(source.shape, generator=gen, dtype=torch.float32)
            source = noise * noise_scale + (1.0 - noise_scale) * source.float()
            del noise
    return TiledDecode(vae, source, plan, shape, timestep_conditioned, timestep)


def decode_tiled(
    vae: Any,
    samples: Any,
    *,
    progress: ProgressCallback | None = None,
    group: TileGroup = LOCAL,
    **settings: int,
) -> torch.Tensor:
    """Decode a video latent tile by tile into a (batch, frames, height, width, channels) fp32 CPU tensor.

    `settings` are those of DECODE_SETTINGS (see `prepare_decode`). Invariants: the result covers every pixel
    once with window weights summing to one (one tile covering everything returns exactly what `vae.decode`
    returns). The output is allocated once; each tile's decode is the only other large allocation. Decode
    noise of timestep-conditioned VAEs comes from one field seeded by `seed`, so overlaps see the same noise.
    Over a `group` (ltx.vae_replica.vae_runner) the tiles go round-robin to its ranks, which send theirs to
    this rank (the only one holding the frames). Interrupts are checked before every tile.
    """
    import comfy.model_management as mm

    unknown = sorted(set(settings) - set(DECODE_SETTINGS))
    if unknown:
        raise TypeError(f"unknown decode settings {', '.join(unknown)}; expected some of {', '.join(DECODE_SETTINGS)}")
    decode = prepare_decode(vae, samples, **settings)  # refuses bad input before any rank is involved
    plan = decode.plan.pixels
    n = len(plan.tiles)
    log.info("tiled VAE decode: latent %s -> %s px (frames x height x width), %s tiles", tuple(decode.source.shape),
             " x ".join(map(str, decode.output_shape[1:4])), " x ".join(map(str, plan.counts)))
    images = torch.zeros(decode.output_shape, dtype=torch.float32)
    # blend_tiles sums over trailing (frames, height, width) axes: hand it the channels-first view of the
    # channels-last output, so the result needs no copy to become ComfyUI's IMAGE layout.
    out = images.permute(0, 4, 1, 2, 3)

    def partial(rank: int, world: int, before_tile: BeforeTile) -> torch.Tensor:
        def before(tile: Tile) -> None:
            mm.throw_exception_if_processing_interrupted()
            if before_tile is not None:
                before_tile(tile)

        def on_tile(done: int, total: int, tile: Tile) -> None:
            if progress is not None:
                progress(min(done * world, n), n)

        with torch.inference_mode():
            return blend_tiles(plan, decode.decode_tile, rank=rank, world=world, out=out, before_tile=before,
                               on_tile=on_tile)

    with torch.inference_mode():
        group.gather(DecodeJob(video_latent(samples).detach().to("cpu"), dict(settings)), partial, plan, out)
    if group is not LOCAL:
        mm.throw_exception_if_processing_interrupted()
        if progress is not None:
            progress(n, n)
    return images


@dataclass(frozen=True)
class DecodeJob:
    """One tiled decode as a worker rank runs it (`prepare_decode(vae, latent, **settings)`, tile by tile)."""

    latent: torch.Tensor
    settings: dict[str, int]

    def tiles(self, vae: Any) -> Callable[[Tile], torch.Tensor]:
        """tile -> its window-weighted pixels (batch, channels, *tile.shape), fp32 on the CPU."""
        decode = prepare_decode(vae, self.latent, **self.settings)
        return lambda tile: decode.decode_tile(tile).to(device="cpu", dtype=torch.float32) * tile.window()


def image_batch(frames: torch.Tensor) -> torch.Tensor:
    """(batch, frames, H, W, C) -> ComfyUI IMAGE (batch * frames, H, W, C), as VAEDecode folds video (a view)."""
    return frames.reshape(-1, *frames.shape[-3:])


def _decode_noise(model: Any) -> tuple[bool, float, float]:
    """(timestep-conditioned, noise scale, timestep) as this ComfyUI's VideoVAE.decode would use them."""
    conditioned = bool(getattr(model, "timestep_conditioning", False))
    params = inspect.signature(model.decode).parameters

    def setting(attribute: str, parameter: str) -> float | None:
        value = getattr(model, attribute, None)
        if value is None and parameter in params and params[parameter].default is not inspect.Parameter.empty:
            value = params[parameter].default
        return None if value is None else float(value)

    noise_scale, timestep = setting("decode_noise_scale", "noise_scale"), setting("decode_timestep", "timestep")
    if conditioned and (noise_scale is None or timestep is None):
        raise VaeDecodeError(
            "this VAE is timestep-conditioned, but this ComfyUI's VideoVAE exposes neither decode_noise_scale/"
            "decode_timestep nor noise_scale/timestep defaults on decode(); the tiled decode cannot give its "
            "tiles one shared noise field"
        )
    return conditioned, noise_scale or 0.0, timestep or 0.0


def _decode_block(vae: Any, latent: torch.Tensor, timestep_conditioned: bool, timestep: float) -> torch.Tensor:
    """Decode one latent block to (B, C, frames, H, W) pixels before `process_output`, on the VAE's device
    in its dtype where it fits (see `_device_buffer`)."""
    model = vae.first_stage_model
    x = latent.to(device=vae.device, dtype=vae.vae_dtype)
    extra = {}
    buffer = _device_buffer(model, x)
    if buffer is not None:
        extra["output_buffer"] = buffer
    if timestep_conditioned:
        # The noise is already in `latent` (one shared field): call the decoder below VideoVAE.decode's
        # own unseeded noise step.
        return model.decoder(model.per_channel_statistics.un_normalize(x), timestep=timestep, **extra)
    return model.decode(x, **extra)


def _device_buffer(model: Any, x: torch.Tensor) -> torch.Tensor | None:
    """An output buffer for the block on the compute device, or None to keep ComfyUI's own.

    Decoders that stream time (`comfy_has_chunked_io`, ComfyUI >= 0.8) write their frames into a buffer on
    ComfyUI's intermediate device (the CPU), in the VAE's dtype; cropping, `process_output` and the blend
    weights would then run on the CPU. A buffer on the GPU keeps them there, as long as it takes at most a
    quarter of the free memory; on the CPU ComfyUI's buffer is already there.
    """
    import comfy.model_management as mm

    if not getattr(model, "comfy_has_chunked_io", False) or x.device.type == "cpu":
        return None
    shape = model.decode_output_shape(x.shape)
    nbytes = x.element_size() * shape[0] * shape[1] * shape[2] * shape[3] * shape[4]
    if nbytes > mm.get_free_memory(x.device) / 4:
        return None
    return torch.empty(shape, device=x.device, dtype=x.dtype)


def _check_block(block: torch.Tensor, src: DecodeSource, scales: tuple[AxisScale, ...]) -> None:
    got = tuple(block.shape[2:])
    if got != src.decoded_shape:
        raise VaeDecodeError(
            f"the VAE decoded a latent block of {src.latent_shape} (frames, height, width) to {got} pixels, but "
            f"its scale factors (time x{scales[0].factor}{' causal' if scales[0].causal else ''}, space "
            f"x{scales[1].factor}) say {src.decoded_shape}; its scale factors do not fit this decoder"
        )
