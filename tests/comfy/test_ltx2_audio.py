"""LTX-2 (LTXAV) audio + video latents through the TDP patcher, on a real ComfyUI with a tiny real LTXAV.

The sampler hands LTX-2 a packed (video, audio) latent; TDP tiles the video only. In the default audio
mode the audio latent that leaves the stage is the one that entered it, bit for bit; in the "average"
mode every tile pass predicts audio and the predictions are averaged (upstream's behaviour).

Skipped on runtimes without LTX-2 (ComfyUI 0.3.75); run with a current ComfyUI:
`COMFYUI_DIR=<ComfyUI 0.24.0> bash scripts/test.sh tests/comfy/test_ltx2_audio.py`.
"""

from __future__ import annotations

import pytest
import torch

from support.ltx_helpers import conditioning, ksample, patch, randn, tiling

pytestmark = pytest.mark.ltx2

CONTEXT_DIM = 32
"""LTXAV takes text context already through its connectors: width 2 x caption_channels of the tiny model."""

LAYOUT_2X2 = dict(height=(2, 2), width=(2, 2))
"""2 x 2 spatial tiles on an 8 x 8 latent: [0, 5) and [3, 8) on each axis."""




@pytest.fixture(scope="module")
def av_inputs(comfy, ltxav):
    """An AV latent made by ComfyUI's own LTXVConcatAVLatent, and the video/audio that went into it."""
    video = randn(1, 128, 2, 8, 8, seed=1)
    audio = randn(1, 8, 5, 16, seed=2)  # LTX-2 audio latent: (batch, 8 channels, time, 16 frequency bins)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": video},
                               audio_latent={"samples": audio, "type": "audio"})
    return latent, video, audio


def _sample_av(comfy, model, latent) -> tuple[torch.Tensor, torch.Tensor]:
    samples = ksample(comfy, model, latent, denoise=0.4, positive=conditioning(1, dim=CONTEXT_DIM),
                      negative=conditioning(2, dim=CONTEXT_DIM))
    video, audio = samples.unbind()  # ComfyUI's NestedTensor(video, audio)
    return video, audio


def test_tiny_ltxav_loads_through_unet_loader_as_ltxav(ltxav):
    from comfy.ldm.lightricks.av_model import LTXAVModel

    assert isinstance(ltxav.model.diffusion_model, LTXAVModel), type(ltxav.model.diffusion_model)


def test_default_audio_mode_returns_the_input_audio_bit_for_bit(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model_call import AUDIO_FROZEN

    latent, video_in, audio_in = av_inputs
    video, audio = _sample_av(comfy, patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_FROZEN), latent)
    assert audio.shape == audio_in.shape and video.shape == video_in.shape
    assert torch.equal(audio, audio_in), f"audio moved by up to {(audio - audio_in).abs().max():.3e}"
    changed = (video - video_in).abs().max().item()
    assert changed > 1e-3, f"the video did not change under 2x2 TDP (max abs change {changed:.3e})"


def test_average_audio_mode_denoises_the_audio(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model_call import AUDIO_AVERAGE

    latent, video_in, audio_in = av_inputs
    video, audio = _sample_av(comfy, patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_AVERAGE), latent)
    moved = (audio - audio_in).abs().max().item()
    assert moved > 1e-3, f"average mode left the audio as it was (max abs change {moved:.3e})"
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()


def test_one_by_one_tiling_in_average_mode_is_bit_identical_to_unpatched_ltxav(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model_call import AUDIO_AVERAGE

    latent, _, _ = av_inputs
    ref_video, ref_audio = _sample_av(comfy, ltxav, latent)
    video, audio = _sample_av(comfy, patch(ltxav, tiling(), audio_mode=AUDIO_AVERAGE), latent)
    assert torch.equal(video, ref_video), f"video off by {(video - ref_video).abs().max():.3e}"
    assert torch.equal(audio, ref_audio), f"audio off by {(audio - ref_audio).abs().max():.3e}"
