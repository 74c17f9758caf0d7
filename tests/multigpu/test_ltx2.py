"""LTX-2 (LTXAV, packed video + audio latents) over 2 ranks equals the single-process patcher.

Skipped on runtimes without LTX-2 (ComfyUI 0.3.75); run with a current ComfyUI:
`COMFYUI_DIR=<ComfyUI 0.24.0> bash scripts/test.sh tests/multigpu/test_ltx2.py`.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.ltx_helpers import add_iclora_guides, conditioning, ksample, patch, randn, tdp_2x2, tiling

pytestmark = [pytest.mark.distributed, pytest.mark.ltx2]

CONTEXT_DIM = 32




@pytest.mark.parametrize("mode", ["held", "average"])
def test_audio_video_ksampler_over_2_ranks_equals_single_process(comfy, ltxav, group_factory, mode):
    from ltx_tdp.ltx.model.audio import AUDIO_AVERAGE, AUDIO_HELD

    audio_mode = AUDIO_HELD if mode == "held" else AUDIO_AVERAGE
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 2, 8, 8, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    kw = dict(denoise=0.4, positive=conditioning(1, dim=CONTEXT_DIM), negative=conditioning(2, dim=CONTEXT_DIM))
    single = ksample(comfy, tdp_2x2(ltxav, audio_mode=audio_mode), latent, **kw)
    multi = ksample(comfy, tdp_2x2(ltxav, group_factory(2), audio_mode=audio_mode), latent, **kw)
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        err = (a - b).abs().max().item()
        assert err <= 1e-5, f"{mode} audio: {name} differs from single-process by {err:.3e} (limit 1e-5)"


def test_iclora_guides_over_2_ranks_equal_single_process(comfy, ltxav, vae, group_factory):
    """A dilated (factor 2) IC-LoRA control video with an attention mask, and a keyframe, in time and space tiles:
    the workers receive the guide entries in the model job and cut them as rank 0 does."""
    pos, neg, video = add_iclora_guides(comfy, vae, {"samples": randn(1, 128, 3, 8, 8, seed=1)},
                                        conditioning(1, dim=CONTEXT_DIM), conditioning(2, dim=CONTEXT_DIM))
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent=video,
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    tiles = tiling(frames=(2, 1), height=(2, 2), width=(2, 1))
    kw = dict(denoise=0.4, positive=pos, negative=neg)
    single = ksample(comfy, patch(ltxav, tiles, audio_mode="average"), latent, **kw)
    multi = ksample(comfy, patch(ltxav, tiles, audio_mode="average", group=group_factory(2)), latent, **kw)
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        err = (a - b).abs().max().item()
        assert err <= 1e-5, f"IC-LoRA guides: {name} over 2 ranks differs from single-process by {err:.3e} (limit 1e-5)"
