"""The two decoders of a tiled decode behind one interface, and the one place that tells them apart.

`TiledDecode` is what a prepared tiled decode offers the decode loop (`ltx.vae.decode`) and a worker rank
(`ltx.vae.job`); `ConvDecode` (`ltx.vae.conv`: LTX-Video, LTX-2) and `DiffusionDecode` (`ltx.vae.diffusion`:
LTX-2.5) implement it. `decoder_of` picks one for a VAE; every question that depends on the decoder (its reach,
the context a quality gives, the prepared decode) goes through it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from ...tiling import LatentGeometry, Tile
from ...tiling.decode_plan import DecodePlan
from ...tiling.dependency import DecoderReach
from ..errors import VaeDecodeError
from .conv import ConvDecode
from .diffusion import DiffusionDecode
from .inputs import check_channels, vae_geometry, video_latent
from .memory import DecodeMemory
from .settings import DecodeSettings


class TiledDecode(Protocol):
    """One prepared tiled decode: its plan, its output and the decode of any one of its tiles.

    Made by `prepare_decode`, which has checked the latent, the VAE and the layout. `decode_raw(tile)` returns
    tile `tile` of `plan.pixels` as the decoder gives it (before `vae.process_output`), cropped, unweighted,
    shaped (batch, channels, *tile.shape), in the VAE's dtype, wherever the decoder left it; `decode_tile(tile)`
    the same processed as ComfyUI's VAEDecode processes it (`ltx.vae.pixels.processed`: fp32 on the CPU). The
    window-weighted sum of every tile's processed pixels is the tiled decode (`decode_tiled`). Another rank
    prepares the same decode from `latent`, the settings, `context` and `noise` (`ltx.vae.job.DecodeJob`).
    """

    latent: torch.Tensor
    """The video latent, as given."""
    context: tuple[int, int]
    """(time, space) latent cells of context a tile decodes around itself where the quality sets it (the
    reach at "exact"; the diffusion decoder's last stage only)."""
    noise: torch.Tensor | None
    """Decode noise another rank must take from this one, once `load` has run (None: every rank draws the same
    from the seed)."""
    plan: DecodePlan
    output_shape: tuple[int, ...]
    """(batch, frames, height, width, channels) of the decoded frames."""
    pixels_to: torch.device
    """Where `decode_raw`'s pixels go next (the CPU; a worker sending over NCCL sets its GPU)."""

    @classmethod
    def reach(cls, vae: Any) -> DecoderReach:
        """How far `vae`'s decoder reaches, counted from its layers."""

    @classmethod
    def decode_context(cls, vae: Any, settings: DecodeSettings) -> tuple[int, int]:
        """The (time, space) `context` that `settings.quality` gives a decode with `vae`."""

    @classmethod
    def prepare(cls, vae: Any, latent: torch.Tensor, geometry: LatentGeometry, settings: DecodeSettings,
                context: tuple[int, int] | None = None, noise: torch.Tensor | None = None) -> "TiledDecode":
        """The decode of a checked video `latent`, planned, nothing decoded (`context`, `noise`: rank 0's)."""

    def memory(self, device_memory: int | None = None) -> DecodeMemory:
        """What the decode holds on the VAE's device (or on one of `device_memory` bytes, where that matters) and
        in system memory, by the pack's accounting (`ltx.vae.memory`)."""

    def load(self) -> None:
        """Load the VAE on its device (ComfyUI's model management) with room for `memory().work`; draw there
        what the decode draws on the device (then `noise` is set). Runs at the first tile if not called."""

    def decode_raw(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s pixels before `process_output`, cropped, in the VAE's dtype, where the decoder left them."""

    def decode_tile(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s processed pixels (batch, channels, *tile.shape), unweighted, fp32 on the CPU."""


def decoder_of(vae: Any) -> type[TiledDecode]:
    """The decoder `vae` (a comfy.sd.VAE or a worker's replica) holds: LTX-2.5's diffusion video decoder
    (`forward_pre_diffusion` and `forward_diff_step`) or ComfyUI's LTX `VideoVAE`. Raises VaeDecodeError for an
    empty VAE or any other."""
    model = getattr(vae, "first_stage_model", None)
    if model is None:
        raise VaeDecodeError("the VAE is empty: its file held no VAE weights")
    decoder = getattr(model, "decoder", None)
    if decoder is not None and hasattr(decoder, "forward_pre_diffusion") and hasattr(decoder, "forward_diff_step"):
        return DiffusionDecode
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    if isinstance(model, VideoVAE):
        return ConvDecode
    raise VaeDecodeError(
        f"the tiled decode needs an LTX video VAE (LTX-Video, LTX-2 or LTX-2.5); this VAE is a {type(model).__name__}"
    )


def prepare_decode(vae: Any, samples: Any, settings: DecodeSettings = DecodeSettings(),
                   context: tuple[int, int] | None = None, noise: torch.Tensor | None = None) -> TiledDecode:
    """A `TiledDecode` of `samples` with `settings`: checked and planned, nothing decoded.

    `context` is the (time, space) context in latent cells and `noise` the decode noise as rank 0 resolved them
    (None: from `settings`). Raises VaeDecodeError for a latent or VAE the decode refuses, tiling.TilingError (in
    pixel units) for a layout whose windows would not sum to one.
    """
    latent = video_latent(samples)
    decoder = decoder_of(vae)
    geometry = vae_geometry(vae)
    check_channels(vae, latent)
    return decoder.prepare(vae, latent, geometry, settings, context, noise)


def decoder_reach(vae: Any) -> tuple[int, int]:
    """(time, space) context in latent cells that makes a tile exact: the decoder's reach (for the diffusion
    decoder, the whole decoder's). A tile decoded with at least this much context on every side has the untiled
    decode's pixels in its crop up to float rounding, unless the decoder has a layer that mixes the whole frame
    (`ltx.vae.reach.whole_frame_layers`), which no finite context makes exact."""
    return decoder_of(vae).reach(vae).context


def decode_context(vae: Any, settings: DecodeSettings) -> tuple[int, int]:
    """(time, space) context in latent cells that `settings.quality` gives a decode with `vae`
    (`TiledDecode.context`)."""
    return decoder_of(vae).decode_context(vae, settings)
