"""The tiled decode with LTX's conv decoders (LTX-Video, LTX-2): `ConvDecode`, one of `ltx.vae.decoder`'s two
`TiledDecode`s.

Each tile decodes the latent cells its pixels need plus a context margin (`tiling.decode_plan`) and is cropped
back to its pixels. With a context of at least the decoder's reach (the "exact" quality) a tile's crop equals
the untiled decode up to float rounding: LTX's conv decoders have no layer that mixes the whole frame
(`ltx.vae.reach`).

Timestep-conditioned LTX VAEs add decode noise (`randn * s + (1 - s) * latent`) inside `VideoVAE.decode`,
unseeded, so two tiles would see different noise in their overlap. Here the noise is drawn once for the
whole latent from a seeded generator, sliced per tile, and the decoder is called below the noise step
(`decoder(per_channel_statistics.un_normalize(x), timestep=...)`), with the noise scale and timestep this
ComfyUI's VideoVAE uses (`decode_noise_scale` / `decode_timestep` attributes in current ComfyUI, the
`noise_scale` / `timestep` defaults of `decode` in 0.3.x).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any

import torch

from ...tiling import LatentGeometry, Tile
from ...tiling.decode_plan import DecodePlan, DecodeSource, plan_decode
from ...tiling.dependency import DecoderReach
from ..errors import VaeDecodeError
from .memory import DecodeMemory, conv_chunk_bytes, conv_working_set, frames_and_tile_bytes, module_bytes
from .pixels import pixel_bytes, processed
from .reach import counted_reach, whole_frame_layers
from .settings import DecodeSettings

log = logging.getLogger(__name__)


class ConvDecode:
    """A prepared tiled decode with an LTX conv decoder (a `ltx.vae.decoder.TiledDecode`).

    `source` is what the tiles decode from: the latent on the CPU, with the decode noise where the VAE adds it
    (drawn from the settings' seed, so another rank draws the same and `noise` is None). The VAE is loaded on
    its device at the first tile (or by `load`).
    """

    noise = None
    """No decode noise travels to other ranks: each draws the same field from the settings' seed."""
    pixels_to = torch.device("cpu")
    """Where `decode_raw`'s pixels go next (a worker sending over NCCL: its GPU). On the CPU ComfyUI's decoder
    writes them into its own buffer there; on a GPU into a buffer on it (`_device_buffer`)."""

    def __init__(self, vae: Any, latent: torch.Tensor, source: torch.Tensor, plan: DecodePlan,
                 context: tuple[int, int], output_shape: tuple[int, ...], timestep_conditioned: bool, timestep: float):
        self.vae = vae
        self.latent = latent
        self.source = source
        self.context = context
        self.plan = plan
        self.output_shape = output_shape
        self.timestep_conditioned = timestep_conditioned
        self.timestep = timestep
        self._loaded = False

    @classmethod
    def reach(cls, vae: Any) -> DecoderReach:
        """The decoder's reach, counted over its kernels, paddings and upsamplers (`ltx.vae.reach`; the tests check
        it against gradients)."""
        return counted_reach(vae.first_stage_model.decoder)

    @classmethod
    def decode_context(cls, vae: Any, settings: DecodeSettings) -> tuple[int, int]:
        """(time, space) context in latent cells that `settings.quality` gives a decode with `vae`: the reach for
        "exact", a preset's cells (never beyond it) otherwise. A decoder with a layer that mixes the whole frame
        (`ltx.vae.reach.whole_frame_layers`) is warned about: no finite context makes its tiles exact."""
        if settings.quality == "custom":
            return settings.context((0, 0))
        reach = cls.reach(vae).context
        mixing = whole_frame_layers(vae.first_stage_model.decoder)
        if mixing and settings.quality == "exact":
            log.warning("this VAE's decoder has layers that mix the whole frame (%s): no finite context makes tiles "
                        "exact; using its convolutional reach", ", ".join(mixing[:3]))
        return settings.context(reach)

    @classmethod
    def prepare(cls, vae: Any, latent: torch.Tensor, geometry: LatentGeometry, settings: DecodeSettings,
                context: tuple[int, int] | None = None, noise: torch.Tensor | None = None) -> "ConvDecode":
        """A `ConvDecode` of a checked `latent` with `settings`: planned, nothing decoded.

        `context` is the (time, space) context in latent cells, resolved from `settings.quality` when None.
        Decode noise of timestep-conditioned VAEs is drawn here once for the whole latent from `settings.seed`,
        so every tile (on any rank) slices the same field (`noise` is not used). Raises VaeDecodeError for a VAE
        whose decode noise cannot be shared, tiling.TilingError (in pixel units) for a layout whose windows would
        not sum to one.
        """
        time, space = cls.decode_context(vae, settings) if context is None else context
        plan = plan_decode(tuple(latent.shape[2:]), settings.tile_sizes(), (time, space, space), geometry)
        shape = (latent.shape[0], *plan.pixel_shape, int(getattr(vae, "output_channels", 3)))
        model = vae.first_stage_model
        timestep_conditioned, noise_scale, timestep = _decode_noise(model)
        if any(getattr(m, "inject_noise", False) for m in model.decoder.modules()):
            log.warning("this VAE's decoder injects its own unseeded noise inside its blocks; tile overlaps will "
                        "not see identical noise there")
        with torch.inference_mode():
            source = latent.detach().to(device="cpu")
            if timestep_conditioned:
                gen = torch.Generator(device="cpu").manual_seed(int(settings.seed))
                drawn = torch.randn(source.shape, generator=gen, dtype=torch.float32)
                source = drawn * noise_scale + (1.0 - noise_scale) * source.float()
                del drawn
        return cls(vae, latent, source, plan, (time, space), shape, timestep_conditioned, timestep)

    def largest_block(self) -> tuple[int, ...]:
        """(batch, channels, frames, height, width) of the largest latent block a tile decodes."""
        return (self.source.shape[0], self.source.shape[1], *self.plan.largest_source())

    def memory(self, device_memory: int | None = None) -> DecodeMemory:
        """The pack's accounting (`ltx.vae.memory`): the weights, the decoder's working set on the largest block
        as this ComfyUI streams it on the VAE's device (or one of `device_memory` bytes), the decoded block where
        it is kept on the device (`pixels_to`), the frames."""
        vae, block = self.vae, self.largest_block()
        model, itemsize = vae.first_stage_model, torch.empty((), dtype=vae.vae_dtype).element_size()
        chunk = conv_chunk_bytes(model, torch.device(getattr(vae, "device", "cpu")), device_memory)
        work = conv_working_set(model.decoder, block, itemsize, chunk)
        pixels = tuple(scale.pixel_length(n) for scale, n in zip(self.plan.scales, block[2:]))
        decoded = pixel_bytes((block[0], self.output_shape[-1], *pixels), vae.vae_dtype)
        on_device = self.pixels_to.type != "cpu" and getattr(model, "comfy_has_chunked_io", False)
        streamed_to_host = getattr(model, "comfy_has_chunked_io", False) and not on_device
        on_host = streamed_to_host or torch.device(getattr(vae, "device", "cpu")).type == "cpu"
        host = frames_and_tile_bytes(self.output_shape, self.plan, itemsize, on_host) + (0 if on_device else decoded)
        return DecodeMemory(module_bytes(model), work, decoded if on_device else 0, 0, host)

    def load(self) -> None:
        """Load the VAE on its device with room for the largest tile: ComfyUI's own decode estimate for the
        largest block (what its VAEDecode asks for), at least the pack's accounting (ComfyUI's model management)."""
        import comfy.model_management as mm

        vae = self.vae
        need = max(vae.memory_used_decode(self.largest_block(), vae.vae_dtype), self.memory().work)
        mm.load_models_gpu([vae.patcher], memory_required=need,
                           force_full_load=bool(getattr(vae, "disable_offload", False)))
        self._loaded = True

    def decode_raw(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s pixels before `process_output`, (batch, channels, *tile.shape) in the VAE's dtype, cropped
        from its decoded block (a view) where the decoder left it: in its buffer on the CPU, or on `pixels_to`."""
        import comfy.model_management as mm

        if not self._loaded:
            self.load()
        vae, src = self.vae, self.plan.source(tile)
        device_context = getattr(mm, "cuda_device_context", None)
        with torch.inference_mode():
            with device_context(vae.device) if device_context is not None else contextlib.nullcontext():
                block = _decode_block(vae, self.source[(Ellipsis, *src.latent)], self.timestep_conditioned,
                                      self.timestep, self.pixels_to)
            _check_block(block, src, self.plan.scales)
            return block[(Ellipsis, *src.crop)]

    def decode_tile(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s processed pixels (batch, channels, *tile.shape), unweighted, fp32 on the CPU."""
        return processed(self.vae, self.decode_raw(tile))


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


def _decode_block(vae: Any, latent: torch.Tensor, timestep_conditioned: bool, timestep: float,
                  pixels_to: torch.device) -> torch.Tensor:
    """Decode one latent block to (B, C, frames, H, W) pixels before `process_output`, in the VAE's dtype: where
    the decoder puts them (its buffer on ComfyUI's intermediate device, the CPU, from ComfyUI 0.8 on; else the
    VAE's device), or on the VAE's device when the pixels go there next (`pixels_to`) and fit (`_device_buffer`)."""
    model = vae.first_stage_model
    x = latent.to(device=vae.device, dtype=vae.vae_dtype)
    extra = {}
    buffer = _device_buffer(model, x) if pixels_to.type != "cpu" else None
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
    ComfyUI's intermediate device (the CPU), in the VAE's dtype. Pixels that go on from the GPU (a worker's tile
    sent over NCCL) are written into a buffer there instead, as long as it takes at most a quarter of the free
    memory (the pack's accounting counts it: `ConvDecode.memory`); on the CPU ComfyUI's buffer is already there.
    """
    import comfy.model_management as mm

    if not getattr(model, "comfy_has_chunked_io", False) or x.device.type == "cpu":
        return None
    shape = model.decode_output_shape(x.shape)
    nbytes = x.element_size() * shape[0] * shape[1] * shape[2] * shape[3] * shape[4]
    if nbytes > mm.get_free_memory(x.device) / 4:
        return None
    return torch.empty(shape, device=x.device, dtype=x.dtype)


def _check_block(block: torch.Tensor, src: DecodeSource, scales: tuple[Any, ...]) -> None:
    got = tuple(block.shape[2:])
    if got != src.decoded_shape:
        raise VaeDecodeError(
            f"the VAE decoded a latent block of {src.latent_shape} (frames, height, width) to {got} pixels, but "
            f"its scale factors (time x{scales[0].factor}{' causal' if scales[0].causal else ''}, space "
            f"x{scales[1].factor}) say {src.decoded_shape}; its scale factors do not fit this decoder"
        )
