"""LTX Sequence Parallel on LTX-2 (audio and video) and LTX-2.5 (keyframe marker, a keyframe and an IC-LoRA guide
with an attention mask, STG and modality guidance) equals one device within the stated bound.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(n)` makes this CPU machine report cpu, cpu:1 (, cpu:2) to
ComfyUI; the tiny 2-block models (UNETLoader), core's deepclones, its thread pool and the pack's dispatch are real.
Skipped where ComfyUI has no comfy/multigpu.py or no LTX-2 (0.3.75), or no LTX-2.5 (0.24: its tests only).
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import add_iclora_guides, conditioning, ksample, randn
from ltx_tdp_devkit.sequence import BOUND, BlockRows, deep_model, relative_error, sequence

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("core_multigpu")]

CONTEXT_DIM = 32
LAYERS = 2


@pytest.fixture(scope="module")
def ltxav2(comfy, comfy_base, ltxav):
    return deep_model(comfy, comfy_base, "ltxav", LAYERS)


@pytest.fixture(scope="module")
def ltx25_2(comfy, comfy_base, ltx25):
    return deep_model(comfy, comfy_base, "ltx25", LAYERS)


def _av_latent(comfy, video: dict | None = None, frames: int = 3, size: int = 8) -> dict:
    video = video or {"samples": randn(1, 128, frames, size, size, seed=1)}
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent=video,
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    return latent


def _kw(cfg: float, **kw) -> dict:
    return dict(cfg=cfg, denoise=0.5, positive=conditioning(1, dim=CONTEXT_DIM),
                negative=conditioning(2, dim=CONTEXT_DIM), **kw)


def _check(multi, single, what: str) -> None:
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        err = relative_error(a, b)
        assert err <= BOUND, f"{what}: {name} differs from one device by {err:.3e} (relative), bound {BOUND}"


@pytest.mark.parametrize("cfg", [1.0, 3.0])
@pytest.mark.parametrize("n", [2, 3])
def test_audio_and_video_equal_one_device(comfy, ltxav2, n, cfg):
    latent = _av_latent(comfy)
    single = ksample(comfy, ltxav2, latent, **_kw(cfg))
    rows = BlockRows()
    with fake_devices(n):
        multi = ksample(comfy, cfg_split(sequence(rows.on(ltxav2, LAYERS)), n), latent, **_kw(cfg))
    _check(multi, single, f"LTX-2, {n} devices, cfg {cfg}")
    assert max(rows.rows) < 192 or (n, cfg) == (2, 3.0), f"the video tokens were not sharded: {sorted(set(rows.rows))}"


GUIDANCE = {
    "none": None,
    "stg": ("LTXVSpatioTemporalGuidance", dict(scale=2.0, blocks="0", start_percent=0.0, end_percent=1.0)),
    "modality": ("LTXVModalityGuidance", dict(modality_scale=3.0, start_percent=0.0, end_percent=1.0)),
}


@pytest.mark.ltx25
@pytest.mark.parametrize("kind", list(GUIDANCE))
def test_ltx25_keyframe_and_guide_equal_one_device(comfy, ltx25_2, vae, kind):
    """An IC-LoRA guide (attention mask, strength 0.8: the guide attention mask) and a keyframe on the last frame,
    with the keyframe marker; the guide tokens fall in the last shard, so shards cut the guide mask's rows.
    3 devices, cfg 3 (3 shards of the batch of 2)."""
    model = ltx25_2
    if GUIDANCE[kind] is not None:
        node, inputs = GUIDANCE[kind]
        (model,) = comfy.run_node(node, model=model, **inputs)
    pos, neg, video = add_iclora_guides(comfy, vae, {"samples": randn(1, 128, 3, 8, 8, seed=1)},
                                        conditioning(1, dim=CONTEXT_DIM), conditioning(2, dim=CONTEXT_DIM))
    latent = _av_latent(comfy, video)
    kw = dict(cfg=3.0, denoise=0.5, positive=pos, negative=neg)
    single = ksample(comfy, model, latent, **kw)
    rows = BlockRows()
    with fake_devices(3):
        multi = ksample(comfy, cfg_split(sequence(rows.on(model, LAYERS)), 3), latent, **kw)
    _check(multi, single, f"LTX-2.5 with guides, {kind}")
    assert len(set(rows.rows)) > 1 or max(rows.rows) < 192, f"not sharded: {sorted(set(rows.rows))}"
