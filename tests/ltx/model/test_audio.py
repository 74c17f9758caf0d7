"""LTX-2 (LTXAV) audio + video latents through the TDP patcher, on a real ComfyUI with a tiny real LTXAV.

The sampler hands LTX-2 a packed (video, audio) latent; TDP tiles the video only. In the default "held"
mode the audio is clean conditioning for the whole stage: the model sees the input audio at timestep 0 at
every call, and the audio that leaves the stage (output and every reported x0) is the one that entered it,
bit for bit. In the "average" mode every tile pass predicts audio and the predictions are averaged
(upstream's behaviour).

Skipped on runtimes without LTX-2 (ComfyUI 0.3.75); run with a current ComfyUI:
`COMFYUI_SRC=<ComfyUI 0.24.0 tree> bash scripts/test.sh tests/ltx/model/test_audio.py`.
"""

from __future__ import annotations

import logging

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import conditioning, ksample, patch, randn, tiling

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


def test_default_audio_mode_is_held():
    from ltx_tdp.ltx.model.audio import AUDIO_HELD
    from ltx_tdp.ltx.model.call import TDPSettings

    assert TDPSettings(tiling()).audio_mode == AUDIO_HELD


def test_held_mode_returns_the_input_audio_bit_for_bit(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model.audio import AUDIO_HELD

    latent, video_in, audio_in = av_inputs
    video, audio = _sample_av(comfy, patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD), latent)
    assert audio.shape == audio_in.shape and video.shape == video_in.shape
    assert torch.equal(audio, audio_in), f"audio moved by up to {(audio - audio_in).abs().max():.3e}"
    changed = (video - video_in).abs().max().item()
    assert changed > 1e-3, f"the video did not change under 2x2 TDP (max abs change {changed:.3e})"


def _boundary_probe(model_patcher, seen: list):
    """A DIFFUSION_MODEL wrapper (the diffusion-model boundary) that records, per tile call, the video and
    audio timesteps and the audio tokens the LTXAV model receives."""
    import comfy.patcher_extension as ext

    def wrapper(executor, x, timestep, *args, **kwargs):
        video, audio = x
        seen.append({"video_t": timestep.detach().float().clone(), "audio_t": kwargs["a_timestep"].detach().float().clone(),
                     "audio": audio.detach().float().clone(), "video_shape": tuple(video.shape)})
        return executor(x, timestep, *args, **kwargs)

    model_patcher.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "ltx_tdp_test_probe", wrapper)
    return model_patcher


def test_held_mode_at_the_diffusion_model_boundary_audio_is_clean_at_timestep_zero(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model.audio import AUDIO_AVERAGE, AUDIO_HELD

    latent, _, audio_in = av_inputs
    held: list = []
    average: list = []
    _sample_av(comfy, _boundary_probe(patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD), held), latent)
    _sample_av(comfy, _boundary_probe(patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_AVERAGE), average), latent)
    # 2 steps x cfg 1 (one cond) x 4 tiles
    assert len(held) == len(average) == 8, f"{len(held)} / {len(average)} tile calls, expected 8"
    for i, (h, a) in enumerate(zip(held, average)):
        assert h["video_shape"] == (1, 128, 2, 5, 5), h["video_shape"]
        assert int(torch.count_nonzero(h["audio_t"])) == 0, \
            f"call {i}: the audio timestep reached {h['audio_t'].abs().max():.4f}, not 0"
        assert torch.equal(h["audio"], audio_in), \
            f"call {i}: the audio tokens differ from the clean input audio by {(h['audio'] - audio_in).abs().max():.3e}"
        # Held mode hands the sampler a mask, so its video timestep is per token; average mode's is per batch.
        held_t = h["video_t"].reshape(1, -1)
        average_t = a["video_t"].reshape(1, -1).expand_as(held_t)
        assert torch.equal(held_t, average_t), \
            f"call {i}: held mode changed the video timesteps by {(held_t - average_t).abs().max():.3e}"
        assert float(a["audio_t"].abs().max()) > 0, "average mode: the audio timestep should follow sigma"


def test_held_mode_keeps_an_i2v_video_mask_and_holds_the_audio(comfy, ltxav):
    from ltx_tdp.ltx.model.audio import AUDIO_HELD

    video = randn(1, 128, 3, 8, 8, seed=4)
    audio = randn(1, 8, 9, 16, seed=5)
    mask = torch.ones(1, 1, 3, 8, 8)
    mask[:, :, 0] = 0.0  # the first latent frame is given (image-to-video)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": video, "noise_mask": mask},
                               audio_latent={"samples": audio, "type": "audio"})
    seen: list = []
    out_video, out_audio = _sample_av(comfy, _boundary_probe(patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD),
                                                             seen), latent)
    assert torch.equal(out_audio, audio), f"audio moved by {(out_audio - audio).abs().max():.3e}"
    # ComfyUI's sampler holds masked video through its inpaint step; its last Euler step may round it by an ulp.
    first_moved = (out_video[:, :, 0] - video[:, :, 0]).abs().max().item()
    assert first_moved <= 1e-5, f"the conditioned first frame moved by {first_moved:.3e}"
    assert seen, "the model was never called"
    for i, call in enumerate(seen):
        t = call["video_t"].reshape(-1, 3, 5, 5)  # per token: (batch, frames, tile height, tile width)
        assert int(torch.count_nonzero(t[:, 0])) == 0, f"call {i}: the first frame's timestep is {t[:, 0].max():.4f}"
        assert float(t[:, 1:].min()) > 0, f"call {i}: a later frame got timestep {t[:, 1:].min():.4f}"
        assert int(torch.count_nonzero(call["audio_t"])) == 0, f"call {i}: audio timestep {call['audio_t'].max():.4f}"


@pytest.mark.parametrize("sampler", ["KSamplerAdvanced", "SamplerCustomAdvanced"])
def test_held_audio_leaves_other_samplers_bit_for_bit(comfy, ltxav, av_inputs, sampler):
    """KSamplerAdvanced, and SamplerCustomAdvanced through both of its outputs: `output` and the last x0
    (`denoised_output`, what ComfyUI's own LTX-2 templates pass on)."""
    from ltx_tdp.ltx.model.audio import AUDIO_HELD

    latent, video_in, audio_in = av_inputs
    model = patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD)
    pos, neg = conditioning(1, dim=CONTEXT_DIM), conditioning(2, dim=CONTEXT_DIM)
    if sampler == "KSamplerAdvanced":
        (out,) = comfy.run_node("KSamplerAdvanced", model=model, add_noise="enable", noise_seed=5, steps=4, cfg=1.0,
                                sampler_name="euler", scheduler="simple", positive=pos, negative=neg,
                                latent_image=latent, start_at_step=2, end_at_step=4,
                                return_with_leftover_noise="disable")
        results = {"output": out}
    else:
        (noise,) = comfy.run_node("RandomNoise", noise_seed=5)
        (guider,) = comfy.run_node("CFGGuider", model=model, positive=pos, negative=neg, cfg=1.0)
        (sampler_obj,) = comfy.run_node("KSamplerSelect", sampler_name="euler")
        (sigmas,) = comfy.run_node("ManualSigmas", sigmas="0.625, 0.4, 0.0")
        out, denoised = comfy.run_node("SamplerCustomAdvanced", noise=noise, guider=guider, sampler=sampler_obj,
                                       sigmas=sigmas, latent_image=latent)
        results = {"output": out, "denoised_output": denoised}
    for name, result in results.items():
        video, audio = result["samples"].unbind()
        assert torch.equal(audio, audio_in), f"{sampler} {name}: audio moved by {(audio - audio_in).abs().max():.3e}"
        moved = (video - video_in).abs().max().item()
        assert moved > 1e-3, f"{sampler} {name}: the video did not change ({moved:.3e})"


@pytest.mark.parametrize("case", ["empty audio", "full noise"])
def test_held_mode_warns_when_the_stage_has_no_audio_yet(comfy, ltxav, caplog, case):
    from ltx_tdp.ltx.model.audio import AUDIO_HELD

    audio = torch.zeros(1, 8, 5, 16) if case == "empty audio" else randn(1, 8, 5, 16, seed=2)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 2, 8, 8, seed=1)},
                               audio_latent={"samples": audio, "type": "audio"})
    model = patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD)
    with caplog.at_level(logging.WARNING, logger="ltx_tdp"):
        ksample(comfy, model, latent, denoise=1.0 if case == "full noise" else 0.4,
                positive=conditioning(1, dim=CONTEXT_DIM), negative=conditioning(2, dim=CONTEXT_DIM))
    warnings = [r.getMessage() for r in caplog.records if "audio_mode 'held'" in r.getMessage()]
    assert len(warnings) == 1, f"expected one held-audio warning, got {warnings}"
    expected = "empty" if case == "empty audio" else "full noise"
    assert expected in warnings[0] and "upscale" in warnings[0] and "'average'" in warnings[0], warnings[0]


def test_held_mode_does_not_warn_for_a_stage_1_audio_at_a_low_sigma(comfy, ltxav, av_inputs, caplog):
    from ltx_tdp.ltx.model.audio import AUDIO_HELD

    latent, _, _ = av_inputs
    with caplog.at_level(logging.WARNING, logger="ltx_tdp"):
        _sample_av(comfy, patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_HELD), latent)
    warnings = [r.getMessage() for r in caplog.records if "audio_mode 'held'" in r.getMessage()]
    assert warnings == [], warnings


def test_the_patcher_node_takes_old_frozen_labels_as_held(comfy, ltxav):
    from ltx_tdp.ltx.model.audio import AUDIO_AVERAGE, AUDIO_HELD
    from ltx_tdp.nodes.tdp_patcher import TDPModelPatcherNode

    for label, mode in [("frozen (stage-1 audio, recommended)", AUDIO_HELD),
                        ("average across tiles (upstream)", AUDIO_AVERAGE), ("held", AUDIO_HELD),
                        ("average", AUDIO_AVERAGE)]:
        assert TDPModelPatcherNode.validate_inputs(audio_mode=label) is True, label
        (model,) = comfy.run_node(TDPModelPatcherNode, model=ltxav, tiling=tiling(**LAYOUT_2X2),
                                  normalize_positions=True, audio_mode=label)
        wrapper = model.wrappers["apply_model"]["ltx_tdp"][0]
        assert wrapper.settings.audio_mode == mode, f"{label!r} -> {wrapper.settings.audio_mode!r}, expected {mode!r}"
    message = TDPModelPatcherNode.validate_inputs(audio_mode="loud")
    assert isinstance(message, str) and "held" in message and "average" in message, message


def test_average_audio_mode_denoises_the_audio(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model.call import AUDIO_AVERAGE

    latent, video_in, audio_in = av_inputs
    video, audio = _sample_av(comfy, patch(ltxav, tiling(**LAYOUT_2X2), audio_mode=AUDIO_AVERAGE), latent)
    moved = (audio - audio_in).abs().max().item()
    assert moved > 1e-3, f"average mode left the audio as it was (max abs change {moved:.3e})"
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()


def test_one_by_one_tiling_in_average_mode_is_bit_identical_to_unpatched_ltxav(comfy, ltxav, av_inputs):
    from ltx_tdp.ltx.model.call import AUDIO_AVERAGE

    latent, _, _ = av_inputs
    ref_video, ref_audio = _sample_av(comfy, ltxav, latent)
    video, audio = _sample_av(comfy, patch(ltxav, tiling(), audio_mode=AUDIO_AVERAGE), latent)
    assert torch.equal(video, ref_video), f"video off by {(video - ref_video).abs().max():.3e}"
    assert torch.equal(audio, ref_audio), f"audio off by {(audio - ref_audio).abs().max():.3e}"
