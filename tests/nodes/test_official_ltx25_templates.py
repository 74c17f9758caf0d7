"""ComfyUI's own LTX-2.5 templates (ComfyUI >= 0.32) with TDP added the way the guide says, run on tiny models.

`video_ltx2_5_t2v` and `video_ltx2_5_i2v` are read at test time from the `comfyui-workflow-templates` package
of the ComfyUI under test and edited in its real frontend (headless Chromium), as a user following
docs/official-templates.md does: an LTX TDP Model Patcher (with a tile config) on the `model` of stage 2's
`LTXVDualCFGGuider`, and the pack's tiled decode (LTX-2.5's diffusion video VAE) in place of stage 2's
`VAEDecodeTiled` (SWAP_DECODE). The frontend's `graphToPrompt` makes the API prompt, which runs over
`POST /prompt`.

The tiny models are built with ComfyUI 0.33's own classes and loaded by the templates' own loaders
(ltx_tdp_devkit.ltx25_files): the LTX-2.5 transformer quantized int8-convrot (`UNETLoader`), LTX-2.5's diffusion
video VAE and the LTX-2 audio VAE + vocoder (`VAELoader`). Mocked, since the real ones are many GB: the
Gemma 4 text encoder (`CLIPLoader` + `CLIPTextEncode` become seeded random conditioning) and the prompt
enhancer (`TextGenerateLTX2Prompt`, an LLM, passes its prompt on). Sizes are the tiny ones of
ltx_tdp_devkit.tiny_prompts.

Each template runs three times: unpatched, patched with the tile config's default 2 x 2 tiles and `held`
audio (stage 2's audio must equal stage 1's bit for bit), and patched with 1 x 1 tiles and `average` audio
(its stage-2 video and audio must equal the unpatched run's bit for bit).

On a ComfyUI without LTX-2.5 (0.24.0, 0.3.75) these skip with tiny_models.LTX25_SKIP_REASON
(marked `ltx25`: on 0.32+ such a skip fails under LTX_TDP_REQUIRE_LTX2=1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.paths import comfyui_has_ltx25
from ltx_tdp_devkit.templates import Stage2, add_tdp_to_stage2, api_id, load_template, ltx2_template_ids, stage2
from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt

pytestmark = [pytest.mark.server, pytest.mark.ltx2, pytest.mark.ltx25]

TEMPLATES = ("video_ltx2_5_t2v", "video_ltx2_5_i2v")
SWAP_DECODE = True
"""Swap stage 2's video decode for the pack's tiled decode, as the guide says (False keeps the template's own,
for a pack whose tiled decode cannot decode LTX-2.5's diffusion video VAE)."""


def _require_ltx25(comfy_dir: Path, template_id: str | None = None) -> None:
    if not comfyui_has_ltx25(comfy_dir):
        pytest.skip(f"{LTX25_SKIP_REASON}: the ComfyUI in {comfy_dir} has no LTX-2.5 transformer (keyframe marker), so its "
                    "LTX-2.5 templates cannot run")
    if template_id is not None:
        assert template_id in ltx2_template_ids(), f"the installed comfyui-workflow-templates has no {template_id}"


@pytest.fixture(scope="module")
def frontend(comfy_dir, comfy_server):
    _require_ltx25(comfy_dir)  # before starting a browser for nothing
    from ltx_tdp_devkit.frontend import browser_page

    with browser_page(comfy_server.url) as page:
        yield page


@pytest.fixture(scope="module")
def tiny_names(comfy_dir, comfy_base, model_names) -> dict[str, str]:
    _require_ltx25(comfy_dir)
    from ltx_tdp_devkit.ltx25_files import build_ltx25_files

    return {**build_tiny_files(comfy_base, model_names), **build_ltx25_files(comfy_base)}


def _api(stage: Stage2, node_id: int) -> str:
    return api_id(stage.path, node_id)


def _run(comfy_server, comfy_base, api: dict, names: dict, stage: Stage2, folder: str) -> dict[str, torch.Tensor]:
    """The API prompt on the tiny models; the latents entering and leaving stage 2, by name."""
    prompt = tiny_prompt(api, names)
    add_latent_saves(prompt, {"stage1_audio": [_api(stage, stage.audio_in[0]), stage.audio_in[1]],
                              "upscaled_video": [_api(stage, stage.video_in[0]), stage.video_in[1]],
                              "stage2_video": [_api(stage, stage.separate), 0],
                              "stage2_audio": [_api(stage, stage.separate), 1]}, folder=folder)
    entry = comfy_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    saved = [k for k, n in prompt.items() if n["class_type"] == "SaveVideo"]
    assert saved and all(entry["outputs"].get(k) for k in saved), f"{folder}: the template saved no video"
    return saved_latents(comfy_base, entry, prompt)


@pytest.mark.parametrize("template_id", TEMPLATES)
def test_ltx25_template_with_tdp_on_stage2_holds_the_audio_and_equals_the_template_at_1x1(
        comfy_dir, comfy_base, comfy_server, frontend, tiny_names, template_id):
    _require_ltx25(comfy_dir, template_id)
    template = load_template(template_id)
    stage = stage2(template_id, template)
    assert stage is not None and stage.guider_type == "LTXVDualCFGGuider", f"{template_id}: stage 2 is {stage}"

    report = frontend.load(template)
    assert report.load_error is None and not report.missing_types, report
    unpatched_api = frontend.graph_to_prompt()

    frontend.load(template)
    edit = add_tdp_to_stage2(frontend, stage, swap_decode=SWAP_DECODE)
    held_api = frontend.graph_to_prompt()
    patcher = _api(stage, edit.patcher)
    assert held_api[patcher]["class_type"] == "LTXTDPModelPatcher", held_api.get(patcher)
    assert held_api[patcher]["inputs"]["audio_mode"] == "held", held_api[patcher]["inputs"]
    assert held_api[_api(stage, stage.guider)]["inputs"]["model"] == [patcher, 0], "stage 2's guider is not patched"
    for guider in stage.stage1_guiders:
        assert held_api[_api(stage, guider)]["inputs"]["model"][0] != patcher, f"stage 1's guider {guider} is patched"
    if SWAP_DECODE:
        assert held_api[_api(stage, edit.decode)]["class_type"] == "LTXTDPTiledVAEDecode", held_api.get(edit.decode)
        assert held_api[_api(stage, edit.decode)]["inputs"]["samples"] == [_api(stage, stage.separate), 0]
        assert _api(stage, stage.video_decode) not in held_api, "the template's own video decode is still there"
    else:
        assert _api(stage, stage.video_decode) in held_api, "the template's own video decode was removed"

    for name, value in (("height_tiles", 1), ("width_tiles", 1)):
        frontend.set_widget(stage.path, edit.tiling, name, value)
    frontend.set_widget(stage.path, edit.patcher, "audio_mode", "average")
    average_api = frontend.graph_to_prompt()
    assert average_api[patcher]["inputs"]["audio_mode"] == "average", average_api[patcher]["inputs"]
    tiles = average_api[_api(stage, edit.tiling)]["inputs"]
    assert (tiles["frames_tiles"], tiles["height_tiles"], tiles["width_tiles"]) == (1, 1, 1), tiles

    unpatched = _run(comfy_server, comfy_base, unpatched_api, tiny_names, stage, f"{template_id}_unpatched")
    log_before = len(comfy_server.log_text())
    held = _run(comfy_server, comfy_base, held_api, tiny_names, stage, f"{template_id}_held")
    warned = re.findall(r"LTX TDP: the first sigma is ([0-9]+\.[0-9]+)", comfy_server.log_text()[log_before:])
    assert warned == [f"{stage.first_sigma:.3f}"], (
        f"the patcher should run on stage 2 only (first sigma {stage.first_sigma}); its sigma warnings: {warned}")
    average = _run(comfy_server, comfy_base, average_api, tiny_names, stage, f"{template_id}_average_1x1")

    stage1, audio = held["stage1_audio"], held["stage2_audio"]
    assert int(torch.count_nonzero(stage1)) > 0, "stage 1 generated no audio"
    assert audio.shape == stage1.shape and torch.equal(audio, stage1), (
        f"held: the stage-2 audio ({stage.output}) differs from stage 1's by up to {(audio - stage1).abs().max():.3e}")
    moved = (held["stage2_video"] - held["upscaled_video"]).abs().max().item()
    assert moved > 1e-3, f"held: stage 2 left the video as it was (max change {moved:.3e})"
    assert torch.equal(unpatched["stage1_audio"], stage1), "stage 1 differs between the runs: the comparison is void"
    for part in ("stage2_video", "stage2_audio"):
        got, want = average[part], unpatched[part]
        assert got.shape == want.shape and torch.equal(got, want), (
            f"1x1 average: {part} differs from the unpatched template's by up to {(got - want).abs().max():.3e}")
    changed = (unpatched["stage2_audio"] - unpatched["stage1_audio"]).abs().max().item()
    assert changed > 0, "the unpatched stage 2 left the audio as it was: the held-audio check proves nothing"
