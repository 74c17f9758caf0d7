"""LTX-2 audio through a TDP upscale stage over `POST /prompt`: the audio that leaves stage 2 is stage 1's.

The prompt is the pack's LTX-2 two-stage example (its API twin, on the tiny models): stage 1 generates video
and audio with SamplerCustomAdvanced, the video is upscaled, and stage 2 runs the TDP-patched model. The
stage-2 audio is saved three ways — SamplerCustomAdvanced's `output` and `denoised_output` (the last x0, what
ComfyUI's own LTX-2 templates pass on) and a KSampler on the same patched model — and must equal the
stage-1 audio bit for bit. The same prompt with the label that workflows saved before "held" existed
("frozen (stage-1 audio, recommended)") must load and behave the same.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt
from ltx_tdp_devkit.workflow_format import load, twin_path

pytestmark = [pytest.mark.server, pytest.mark.ltx2]

TWO_STAGE = PACK_ROOT / "example_workflows" / "ltx2_tdp_4k_two_stage.json"
_seeds = itertools.count(500)  # an identical prompt is served from ComfyUI's cache: vary a seed


@pytest.fixture(scope="module")
def tiny_files(comfy_base: Path, model_names: dict[str, str]) -> dict[str, str]:
    from ltx_tdp_devkit.tiny_models import has_ltxav

    if not has_ltxav():
        import comfyui_version

        pytest.skip(f"ComfyUI {comfyui_version.__version__} has no LTX-2; run with a current ComfyUI")
    return build_tiny_files(comfy_base, model_names)


def _node_of(prompt: dict, class_type: str, **inputs) -> str:
    found = [k for k, n in prompt.items() if n["class_type"] == class_type
             and all(n["inputs"].get(name) == value for name, value in inputs.items())]
    assert len(found) == 1, f"expected one {class_type} with {inputs} in the two-stage twin, found {found}"
    return found[0]


def _held_audio_prompt(names: dict[str, str], audio_mode: str, prefix: str) -> dict:
    """The two-stage twin on the tiny models, saving stage 1's audio and stage 2's audio and video latents."""
    prompt = tiny_prompt(load(twin_path(TWO_STAGE)), names)
    patcher = _node_of(prompt, "LTXTDPModelPatcher")
    prompt[patcher]["inputs"]["audio_mode"] = audio_mode
    stage2 = next(k for k, n in prompt.items()
                  if n["class_type"] == "CFGGuider" and n["inputs"]["model"] == [patcher, 0])
    sampler2 = _node_of(prompt, "SamplerCustomAdvanced", guider=[stage2, 0])
    sampler1 = next(k for k, n in prompt.items() if n["class_type"] == "SamplerCustomAdvanced" and k != sampler2)
    stage1_split = _node_of(prompt, "LTXVSeparateAVLatent", av_latent=[sampler1, 0])
    for noise in (k for k, n in prompt.items() if n["class_type"] == "RandomNoise"):
        prompt[noise]["inputs"]["noise_seed"] = next(_seeds)
    upscaled_av = prompt[sampler2]["inputs"]["latent_image"]
    positive, negative = (prompt[stage2]["inputs"]["positive"], prompt[stage2]["inputs"]["negative"])
    added = {
        "t_ksampler": {"class_type": "KSampler", "inputs": {
            "model": [patcher, 0], "seed": next(_seeds), "steps": 2, "cfg": 1.0, "sampler_name": "euler",
            "scheduler": "simple", "positive": positive, "negative": negative, "latent_image": upscaled_av,
            "denoise": 0.15}},
        "t_split_output": {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": [sampler2, 0]}},
        "t_split_denoised": {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": [sampler2, 1]}},
        "t_split_ksampler": {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["t_ksampler", 0]}},
        "t_split_upscaled": {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": upscaled_av}},
    }
    saves = {"stage1_audio": [stage1_split, 1], "upscaled_video": ["t_split_upscaled", 0],
             "output_audio": ["t_split_output", 1], "output_video": ["t_split_output", 0],
             "denoised_audio": ["t_split_denoised", 1], "denoised_video": ["t_split_denoised", 0],
             "ksampler_audio": ["t_split_ksampler", 1], "ksampler_video": ["t_split_ksampler", 0]}
    prompt.update(added)
    return add_latent_saves(prompt, saves, prefix)


@pytest.mark.parametrize("audio_mode", ["held", "frozen (stage-1 audio, recommended)"],
                         ids=["held", "old-saved-label"])
def test_stage_2_audio_equals_stage_1_audio_through_every_sampler_output(comfy_server, comfy_base, tiny_files,
                                                                         audio_mode):
    prefix = f"held_audio_{next(_seeds)}"
    prompt = _held_audio_prompt(tiny_files, audio_mode, prefix)
    entry = comfy_server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success", entry["status"]
    saved = saved_latents(comfy_base, entry, prompt)
    stage1 = saved["stage1_audio"]
    assert int(torch.count_nonzero(stage1)) > 0, "stage 1 generated no audio"
    for way in ("output", "denoised", "ksampler"):
        audio, video = saved[f"{way}_audio"], saved[f"{way}_video"]
        assert audio.shape == stage1.shape, f"{way}: audio shape {tuple(audio.shape)} vs {tuple(stage1.shape)}"
        assert torch.equal(audio, stage1), \
            f"{way}: the stage-2 audio differs from stage 1's by up to {(audio - stage1).abs().max():.3e}"
        moved = (video - saved["upscaled_video"]).abs().max().item()
        assert moved > 1e-3, f"{way}: stage 2 left the video as it was (max change {moved:.3e})"
