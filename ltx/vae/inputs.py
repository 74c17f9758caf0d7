"""What a tiled decode checks before it plans anything: a video latent, the VAE's scale factors, matching channels.

Every refusal is a VaeDecodeError whose message says what to connect instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...tiling import AxisScale, LatentGeometry, video_part
from ..errors import VaeDecodeError


def video_latent(samples: Any) -> torch.Tensor:
    """The video part of LATENT["samples"] (`tiling.video_part`: an LTX-2 audio+video latent decodes its video).
    Raises VaeDecodeError unless it is a 5-D (batch, channels, frames, height, width) tensor."""
    samples = video_part(samples)
    if not isinstance(samples, torch.Tensor):
        raise VaeDecodeError(f"the latent holds a {type(samples).__name__}, not a tensor")
    if samples.ndim != 5:
        kind = "an image latent" if samples.ndim == 4 else f"a {samples.ndim}-D latent"
        raise VaeDecodeError(
            f"the tiled video decode needs a video latent (batch, channels, frames, height, width); got "
            f"{kind} of shape {tuple(samples.shape)}"
        )
    return samples


def vae_geometry(vae: Any) -> LatentGeometry:
    """The latent geometry of an LTX video VAE (conv or LTX-2.5 diffusion decoder), read from its `upscale_ratio`.

    Raises VaeDecodeError for scale factors that are not (causal or plain time factor, height factor, width
    factor). Whether it is an LTX video VAE at all is `ltx.vae.decoder.decoder_of`'s question, asked first.
    """
    ratio = getattr(vae, "upscale_ratio", None)
    if not (isinstance(ratio, (tuple, list)) and len(ratio) == 3 and callable(ratio[0])):
        raise VaeDecodeError(f"the VAE's scale factors {ratio!r} are not (time, height, width) video factors")
    time = _time_scale(ratio[0])
    if time is None or not all(isinstance(r, int) and r >= 1 for r in ratio[1:]):
        raise VaeDecodeError(
            f"the VAE maps 1, 2, 3 latent frames to {[ratio[0](n) for n in (1, 2, 3)]} frames and space by "
            f"x{ratio[1]}, x{ratio[2]}; the tiled decode knows only whole factors (time causal or plain)"
        )
    return LatentGeometry(time, AxisScale(ratio[1]), AxisScale(ratio[2]))


def _time_scale(frames_for: Callable[[int], int]) -> AxisScale | None:
    counts = [int(frames_for(n)) for n in range(1, 6)]
    factor = counts[1] - counts[0]
    for scale in (AxisScale(factor, causal=True), AxisScale(factor)) if factor >= 1 else ():
        if counts == [scale.pixel_length(n) for n in range(1, 6)]:
            return scale
    return None


def check_channels(vae: Any, latent: torch.Tensor) -> None:
    """Refuse a latent whose channel count is not the one `vae` decodes."""
    channels = getattr(vae, "latent_channels", None)
    if channels is not None and latent.shape[1] != channels:
        raise VaeDecodeError(
            f"the latent has {latent.shape[1]} channels but this VAE decodes {channels}-channel latents; "
            f"connect the VAE that belongs to the model that made the latent"
        )
