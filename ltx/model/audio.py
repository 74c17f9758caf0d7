"""LTX-2 audio through a TDP stage: audio is never tiled, and by default it is held as clean conditioning.

An LTX-2 (LTXAV) sampler works on a packed (B, 1, N) latent: the video latent, then the audio latent
(`latent_shapes` gives their shapes). Every tile pass sees the whole audio but only part of the video, so
a per-tile audio prediction is not a meaningful result. Two modes:

* **held** (default): for the whole stage the audio is clean conditioning, the way LTX-2 conditions video
  on given audio. The sampler gets a denoise mask that is 0 on every audio token (the video part stays as
  the user set it, e.g. an i2v first frame), so ComfyUI's LTXAV gives the audio the timestep
  `mask * sigma = 0`, its inpaint step feeds the model the clean input audio at every call, and every x0
  it reports (also `SamplerCustomAdvanced`'s `denoised_output`) carries the input audio. The audio that
  leaves the stage is the one that entered it, bit for bit.
* **average**: every tile pass predicts audio and the predictions are averaged (upstream LTX-2's
  behaviour, for comparison; not a meaningful audio result).

The combo values are saved in users' workflows: `LEGACY_AUDIO_MODES` maps the labels of earlier versions
("frozen (...)", the predecessor of held) to today's values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..errors import UnsupportedInput

AUDIO_HELD = "held"
AUDIO_AVERAGE = "average"
AUDIO_MODES = (AUDIO_HELD, AUDIO_AVERAGE)

LEGACY_AUDIO_MODES = {
    "frozen (stage-1 audio, recommended)": AUDIO_HELD,
    "average across tiles (upstream)": AUDIO_AVERAGE,
}
"""Labels that workflows saved by earlier versions of the pack carry, and the mode each one means now."""

FULL_NOISE_SIGMA = 0.95
"""A first sigma at or above this means the stage starts from (nearly) pure noise: no stage-1 audio to hold."""


def audio_mode(label: str) -> str:
    """The audio mode a combo value means: a value of AUDIO_MODES, or a legacy label mapped to one.

    Raises UnsupportedInput naming the accepted values for anything else.
    """
    if label in AUDIO_MODES:
        return label
    if label in LEGACY_AUDIO_MODES:
        return LEGACY_AUDIO_MODES[label]
    raise UnsupportedInput(f"unknown audio_mode {label!r}; choose one of {', '.join(AUDIO_MODES)}")


def pack_latents(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Flatten each (B, ...) latent and join them along the last axis: ComfyUI's packed (B, 1, N) layout."""
    return torch.cat([p.reshape(p.shape[0], 1, -1) for p in parts], dim=-1)


def unpack_latents(packed: torch.Tensor, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Inverse of `pack_latents` for the given per-latent shapes (views where possible)."""
    parts, at = [], 0
    for shape in shapes:
        n = math.prod(shape[1:])
        parts.append(packed[:, :, at:at + n].reshape(packed.shape[0], *shape[1:]))
        at += n
    return parts


def has_audio(latent_shapes: Sequence[Sequence[int]] | None) -> bool:
    """Whether a sampler's latent is packed video + audio (LTX-2) rather than a plain video latent."""
    return latent_shapes is not None and len(latent_shapes) > 1


def held_denoise_mask(denoise_mask: torch.Tensor | None, latent_shapes: Sequence[Sequence[int]],
                      batch: int, device: torch.device) -> torch.Tensor:
    """The packed denoise mask of a held-audio stage: the video part as given (all ones when the sampler
    had no mask), every audio token 0.

    The result has the packed layout of the latent (batch, 1, N) and is float, as ComfyUI's sampler makes
    its own masks.
    """
    shapes = [(batch, *tuple(int(v) for v in s)[1:]) for s in latent_shapes]
    if denoise_mask is None:
        video = torch.ones(shapes[0], dtype=torch.float32, device=device)
    else:
        video = unpack_latents(denoise_mask.to(device=device, dtype=torch.float32), shapes)[0]
    extras = [torch.zeros(s, dtype=torch.float32, device=device) for s in shapes[1:]]
    return pack_latents([video, *extras])


def restore_audio(out: torch.Tensor, latent_image: torch.Tensor, latent_shapes: Sequence[Sequence[int]]) -> torch.Tensor:
    """`out` with every part after the video replaced by the same part of `latent_image`, bit for bit."""
    parts_out = unpack_latents(out, latent_shapes)
    parts_in = unpack_latents(latent_image.to(out.device, out.dtype), latent_shapes)
    return pack_latents([parts_out[0], *parts_in[1:]])


def audio_not_ready(latent_image: torch.Tensor, latent_shapes: Sequence[Sequence[int]],
                    sigmas: torch.Tensor | None) -> str | None:
    """Why the audio entering a held-audio stage is not a stage-1 result (None when it looks like one).

    The audio is empty (all zeros, as LTXVEmptyLatentAudio makes it), or the stage starts at full noise
    (first sigma >= FULL_NOISE_SIGMA): a single-stage text/image-to-audio+video sampler, where the audio
    still has to be generated.
    """
    audio = unpack_latents(latent_image, latent_shapes)[1:]
    if all(int(torch.count_nonzero(a)) == 0 for a in audio):
        return "the audio latent entering it is empty (all zeros)"
    if sigmas is not None and len(sigmas) and float(sigmas[0]) >= FULL_NOISE_SIGMA:
        return f"it starts from full noise (first sigma {float(sigmas[0]):.3f}), so its audio is not generated yet"
    return None
