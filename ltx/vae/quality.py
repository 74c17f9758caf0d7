"""The context a tiled decode gives its tiles: the decoder's reach for "exact", a preset's cells otherwise."""

from __future__ import annotations

import logging
from typing import Any

from .reach import counted_reach, whole_frame_layers
from .settings import DecodeSettings

log = logging.getLogger(__name__)


def decoder_reach(vae: Any) -> tuple[int, int]:
    """(time, space) context in latent cells that makes a tile exact: the decoder's reach, counted over its
    kernels, paddings and upsamplers (`ltx.vae.reach.counted_reach`; the tests check it against gradients).

    A tile decoded with at least this many latent cells of context on every side has the same pixels in
    its crop as the untiled decode up to float rounding, unless the decoder has a layer that mixes the
    whole frame (`ltx.vae.reach.whole_frame_layers`), which no finite context makes exact.
    """
    from .diffusion import diffusion_reach, is_diffusion_vae

    if is_diffusion_vae(vae):
        return diffusion_reach(vae).context
    reach = counted_reach(vae.first_stage_model.decoder)
    return reach.time.context, reach.space.context


def decode_context(vae: Any, settings: DecodeSettings) -> tuple[int, int]:
    """(spatial, temporal) context in latent cells that `settings.quality` gives a decode with `vae`."""
    if settings.quality == "custom":
        return settings.context((0, 0))
    time_reach, space_reach = decoder_reach(vae)
    mixing = whole_frame_layers(vae.first_stage_model.decoder)
    if mixing and settings.quality == "exact":
        log.warning("this VAE's decoder has layers that mix the whole frame (%s): no finite context makes tiles "
                    "exact; using its convolutional reach", ", ".join(mixing[:3]))
    return settings.context((space_reach, time_reach))
