"""LTX-2.5 (ComfyUI 0.32+) over 2 ranks equals the single-process patcher: the keyframe marker crop on the workers'
replicas (temporal tiles), and STG / modality guidance flags carried to the workers in the model job."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.ltx_helpers import GUIDANCE, conditioning, ksample, patch, randn, tiling

pytestmark = [pytest.mark.distributed, pytest.mark.ltx2, pytest.mark.ltx25]

CONTEXT_DIM = 32


def _sample(comfy, model, tiles, group=None):
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 4, 4, 4, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    tdp = patch(model, tiles, audio_mode="average", group=group)
    return ksample(comfy, tdp, latent, steps=2, denoise=0.5, positive=conditioning(1, dim=CONTEXT_DIM),
                   negative=conditioning(2, dim=CONTEXT_DIM))


@pytest.mark.parametrize("kind", list(GUIDANCE))
def test_ltx25_over_2_ranks_equals_single_process_with_guidance_flags(comfy, ltx25, group_factory, kind):
    model = ltx25
    if GUIDANCE[kind] is not None:
        node, inputs = GUIDANCE[kind]
        (model,) = comfy.run_node(node, model=ltx25, **inputs)
    tiles = tiling(frames=(2, 1), width=(2, 1))  # a temporal tile mid-clip: the marker crop matters on rank 1 too
    single = _sample(comfy, model, tiles)
    multi = _sample(comfy, model, tiles, group_factory(2))
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        err = (a - b).abs().max().item()
        assert err <= 1e-5, f"{kind}: {name} over 2 ranks differs from single-process by {err:.3e} (limit 1e-5)"
    if kind != "none":  # the flags change the result, so a worker that dropped them would differ above
        plain = _sample(comfy, ltx25, tiles)
        change = max((a - b).abs().max().item() for a, b in zip(single.unbind(), plain.unbind()))
        assert change > 1e-3, f"{kind} guidance changed the result by only {change:.3e}"
