"""LTX Sequence Parallel on LTX-2 (audio and video) and LTX-2.5 (keyframe marker, a keyframe and an IC-LoRA guide
with an attention mask, STG and modality guidance) equals one device within the stated bound.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(n)` makes this CPU machine report cpu, cpu:1 (, cpu:2) to
ComfyUI; the tiny 2-block models (UNETLoader), core's deepclones, its thread pool and the pack's dispatch are real.
Skipped where ComfyUI has no comfy/multigpu.py or no LTX-2 (0.3.75), or no LTX-2.5 (0.24: its tests only).
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import GUIDANCE, add_iclora_guides, conditioning, ksample, randn
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
    assert max(rows.rows) < 192, f"192 video tokens and the guides' were not sharded: {sorted(set(rows.rows))}"


def test_bytes_exchanged_are_the_documented_bytes_per_layer(comfy, ltxav2):
    """Every rank of every call receives exactly LAYERS x bytes_per_layer (video self-attention's and
    video_to_audio_attn's keys and values of the other shard) plus the last block's gathered output."""
    from ltx_tdp.ltx.sequence.exchange import bytes_per_layer
    from ltx_tdp.ltx.sequence.run import CONTEXT_KEY

    contexts = []

    def record(args, extra):
        contexts.append(args["transformer_options"][CONTEXT_KEY])
        return extra["original_block"](args)

    model = ltxav2.clone()
    model.set_model_patch_replace(record, "dit", "double_block", 0)
    with fake_devices(2):
        ksample(comfy, cfg_split(sequence(model), 2), _av_latent(comfy), **_kw(1.0))
    width = 16  # the tiny model's video and audio attention widths (2 heads x 8)
    per_call = LAYERS * bytes_per_layer(192, 96, 1, 4, (width, width)) + 96 * 4 * width
    got = {ctx.exchange.bytes_received[ctx.rank] for ctx in contexts}
    assert len(contexts) == 2 * 2 and got == {per_call}, f"bytes received per rank and call: {got}, want {per_call}"
