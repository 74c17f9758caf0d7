"""LTX-2 (LTXAV, packed video + audio latents) over 2 ranks equals the single-process patcher.

Skipped on runtimes without LTX-2 (ComfyUI 0.3.75); run with a current ComfyUI:
`COMFYUI_DIR=<ComfyUI 0.24.0> bash scripts/test.sh tests/multigpu/test_ltx2.py`.
"""

from __future__ import annotations

import pytest
import torch

from support.ltx_helpers import conditioning, ksample, tiling

pytestmark = [pytest.mark.distributed, pytest.mark.ltx2]

CONTEXT_DIM = 32
LAYOUT = dict(height=(2, 2), width=(2, 2))


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def ltxav(comfy, model_names):
    from support.tiny_models import has_ltxav

    if not has_ltxav():
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no LTX-2 (comfy.ldm.lightricks.av_model); "
                    "point COMFYUI_DIR at a current ComfyUI")
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxav"], weight_dtype="default")
    return model


def _tdp(model, audio_mode: str, group=None):
    from ltx_tdp.ltx.model_call import TDPSettings
    from ltx_tdp.ltx.patch import apply_tdp

    return apply_tdp(model, TDPSettings(tiling(**LAYOUT), True, audio_mode),
                     group.model_runner(model) if group else None)


@pytest.mark.parametrize("mode", ["frozen", "average"])
def test_audio_video_ksampler_over_2_ranks_equals_single_process(comfy, ltxav, group_factory, mode):
    from ltx_tdp.ltx.model_call import AUDIO_AVERAGE, AUDIO_FROZEN

    audio_mode = AUDIO_FROZEN if mode == "frozen" else AUDIO_AVERAGE
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": _randn(1, 128, 2, 8, 8, seed=1)},
                               audio_latent={"samples": _randn(1, 8, 5, 16, seed=2), "type": "audio"})
    kw = dict(denoise=0.4, positive=conditioning(1, dim=CONTEXT_DIM), negative=conditioning(2, dim=CONTEXT_DIM))
    single = ksample(comfy, _tdp(ltxav, audio_mode), latent, **kw)
    multi = ksample(comfy, _tdp(ltxav, audio_mode, group_factory(2)), latent, **kw)
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        err = (a - b).abs().max().item()
        assert err <= 1e-5, f"{mode} audio: {name} differs from single-process by {err:.3e} (limit 1e-5)"
