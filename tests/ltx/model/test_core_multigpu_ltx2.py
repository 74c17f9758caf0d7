"""LTX-2 and LTX-2.5 over ComfyUI's own MultiGPU equal one device bit for bit: held and average audio, IC-LoRA and
keyframe guides in temporal and spatial tiles, the LTX-2.5 keyframe marker and its guidance flags, and a LoRA
that ComfyUI applies on every device's clone.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(2)` makes this CPU machine report cpu and cpu:1 to
ComfyUI; the models (UNETLoader), the deepclones, the thread pool and the pack's dispatch are real. cfg 3
throughout, so every call carries cond and uncond (one call per step at batch 2). Skipped where ComfyUI has no
comfy/multigpu.py or no LTX-2 (0.3.75), or no LTX-2.5 (0.24: its tests only).
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import TileCalls, cfg_split, fake_devices
from ltx_tdp_devkit.core_multigpu_fixtures import core_multigpu, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.ltx_helpers import (GUIDANCE, add_iclora_guides, conditioning, ksample, patch, randn, tdp_2x2,
                                        tiling)

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("core_multigpu")]

CONTEXT_DIM = 32
CFG = 3.0
LORA = "tdp_tiny_ltx2_lora.safetensors"


def _av_latent(comfy, video: dict | None = None, frames: int = 2, size: int = 8) -> dict:
    video = video or {"samples": randn(1, 128, frames, size, size, seed=1)}
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent=video,
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    return latent


def _kw(**kw) -> dict:
    return dict(cfg=CFG, denoise=0.4, positive=conditioning(1, dim=CONTEXT_DIM),
                negative=conditioning(2, dim=CONTEXT_DIM), **kw)


def _assert_equal(multi, single, what: str) -> None:
    for name, a, b in zip(("video", "audio"), multi.unbind(), single.unbind()):
        assert torch.equal(a, b), f"{what}: {name} over 2 devices differs from one device by {(a - b).abs().max():.3e}"


@pytest.mark.parametrize("mode", ["held", "average"])
def test_audio_video_over_two_devices_equals_one_device(comfy, ltxav, mode):
    latent = _av_latent(comfy)
    single = ksample(comfy, tdp_2x2(ltxav, audio_mode=mode), latent, **_kw())
    calls = TileCalls()
    with fake_devices(2):
        model = cfg_split(calls.on(tdp_2x2(ltxav, audio_mode=mode)), 2)
        multi = ksample(comfy, model, latent, **_kw())
    _assert_equal(multi, single, f"{mode} audio")
    assert calls.models() == 2, f"{mode} audio: the tiles ran on {calls.models()} models, expected 2"
    if mode == "held":
        audio_in, audio_out = latent["samples"].unbind()[1], multi.unbind()[1]
        assert torch.equal(audio_out, audio_in), "held audio: the audio leaving the stage is not the audio entering it"


def test_iclora_and_keyframe_guides_in_time_and_space_tiles_over_two_devices(comfy, ltxav, vae):
    """A dilated (factor 2) IC-LoRA control video with an attention mask and a keyframe; 2 x 2 x 2 tiles, so both
    devices cut guide tokens, keyframe positions and attention entries for temporal and spatial tiles."""
    pos, neg, video = add_iclora_guides(comfy, vae, {"samples": randn(1, 128, 3, 8, 8, seed=1)},
                                        conditioning(1, dim=CONTEXT_DIM), conditioning(2, dim=CONTEXT_DIM))
    latent = _av_latent(comfy, video)
    tiles = tiling(frames=(2, 1), height=(2, 2), width=(2, 1))
    kw = dict(cfg=CFG, denoise=0.4, positive=pos, negative=neg)
    single = ksample(comfy, patch(ltxav, tiles, audio_mode="average"), latent, **kw)
    calls = TileCalls()
    with fake_devices(2):
        multi = ksample(comfy, cfg_split(calls.on(patch(ltxav, tiles, audio_mode="average")), 2), latent, **kw)
    _assert_equal(multi, single, "IC-LoRA + keyframe guides")
    assert calls.counts() == [8, 8], f"8 tiles a call over 2 devices, 2 steps: tile calls per device {calls.counts()}"


@pytest.mark.parametrize("lora_at", ["before_the_split", "after_tdp_and_the_split"])
def test_a_lora_is_applied_on_every_devices_clone(comfy, comfy_base, ltxav, lora_at):
    """LoraLoaderModelOnly before MultiGPU CFG Split (its deepclone is a fresh load, the LoRA comes with the
    clone's patches) or after TDP and the split (ComfyUI's match_multigpu_clones carries it when sampling starts)."""
    from ltx_tdp_devkit.tiny_models import LTXAV_CONFIG
    from ltx_tdp_devkit.tiny_workflow_models import build_iclora

    import folder_paths

    build_iclora(comfy_base / "models" / "loras" / LORA, LTXAV_CONFIG, seed=5)
    folder_paths.filename_list_cache.clear()

    def lora(model):
        return comfy.run_node("LoraLoaderModelOnly", model=model, lora_name=LORA, strength_model=1.0)[0]

    latent = _av_latent(comfy)
    single = ksample(comfy, tdp_2x2(lora(ltxav), audio_mode="average"), latent, **_kw())
    without = ksample(comfy, tdp_2x2(ltxav, audio_mode="average"), latent, **_kw())
    with fake_devices(2):
        if lora_at == "before_the_split":
            model = tdp_2x2(cfg_split(lora(ltxav), 2), audio_mode="average")
        else:
            model = lora(cfg_split(tdp_2x2(ltxav, audio_mode="average"), 2))
        multi = ksample(comfy, model, latent, **_kw())
    _assert_equal(multi, single, f"LoRA {lora_at}")
    changed = (multi.unbind()[0] - without.unbind()[0]).abs().max().item()
    assert changed > 1e-3, f"the LoRA changed the video by only {changed:.3e}: the comparison proves nothing"


def test_conds_with_hooks_are_left_to_comfyuis_own_cond_split(comfy, comfy_base, ltxav, caplog):
    """A hook LoRA on the positive conditioning (ComfyUI's Create Hook LoRA (MO) and Cond Set Props): its weights
    are patched per cond by ComfyUI on each device's copy, so TDP leaves the conds to core's split (each device runs
    its conds' tiles) and says so; the result is one device's."""
    from ltx_tdp_devkit.tiny_models import LTXAV_CONFIG
    from ltx_tdp_devkit.tiny_workflow_models import build_iclora

    import folder_paths

    build_iclora(comfy_base / "models" / "loras" / LORA, LTXAV_CONFIG, seed=5)
    folder_paths.filename_list_cache.clear()
    (hooks,) = comfy.run_node("CreateHookLoraModelOnly", lora_name=LORA, strength_model=1.0)
    (positive,) = comfy.run_node("ConditioningSetProperties", cond_NEW=conditioning(1, dim=CONTEXT_DIM), strength=1.0,
                                 set_cond_area="default", hooks=hooks)
    latent = _av_latent(comfy)
    kw = dict(cfg=CFG, denoise=0.4, positive=positive, negative=conditioning(2, dim=CONTEXT_DIM))
    single = ksample(comfy, tdp_2x2(ltxav, audio_mode="average"), latent, **kw)
    plain = ksample(comfy, tdp_2x2(ltxav, audio_mode="average"), latent, **_kw())
    calls = TileCalls()
    with fake_devices(2), caplog.at_level("WARNING", logger="ltx_tdp"):
        multi = ksample(comfy, cfg_split(calls.on(tdp_2x2(ltxav, audio_mode="average")), 2), latent, **kw)
    _assert_equal(multi, single, "hooked conditioning")
    assert (multi.unbind()[0] - plain.unbind()[0]).abs().max().item() > 1e-3, "the hook LoRA changed nothing"
    assert calls.counts() == [8, 8] and calls.batches() == {1}, (
        f"core's cond split runs cond and uncond (batch 1) on one device each, every tile: {calls.counts()}, "
        f"batches {calls.batches()}")
    assert "conditioning with hooks" in caplog.text, "no warning that hooked conds are left to core's split"


@pytest.mark.ltx25
@pytest.mark.parametrize("kind", list(GUIDANCE))
def test_ltx25_keyframe_marker_and_guidance_over_two_devices(comfy, ltx25, kind):
    """A temporal tile starting mid-clip on either device: the keyframe marker crop must hold on the clone too;
    STG and modality guidance add model calls with their own transformer options."""
    model = ltx25
    if GUIDANCE[kind] is not None:
        node, inputs = GUIDANCE[kind]
        (model,) = comfy.run_node(node, model=ltx25, **inputs)
    tiles = tiling(frames=(2, 1), width=(2, 1))
    latent = _av_latent(comfy, frames=4, size=4)
    kw = _kw()
    kw["denoise"] = 0.5
    single = ksample(comfy, patch(model, tiles, audio_mode="average"), latent, **kw)
    calls = TileCalls()
    with fake_devices(2):
        multi = ksample(comfy, cfg_split(calls.on(patch(model, tiles, audio_mode="average")), 2), latent, **kw)
    _assert_equal(multi, single, f"LTX-2.5, {kind}")
    assert calls.models() == 2, f"LTX-2.5, {kind}: the tiles ran on {calls.models()} models, expected 2"
