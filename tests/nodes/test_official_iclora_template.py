"""ComfyUI's own IC-LoRA template (`video_ltx2_3_ic_lora`, in the comfyui-workflow-templates of ComfyUI 0.33.0 and
0.24.0) with the TDP stage 2 the guide adds (docs/official-templates.md, "The IC-LoRA template: adding a TDP
stage 2"), edited in the real frontend (headless Chromium) and run over `POST /prompt` on tiny models.

The template is single-stage: one KSampler (euler_ancestral, from noise) at the final size, its model the IC-LoRA
(union control ref0.5, reference downscale factor 2) and its guide the control video's depth. TDP belongs on an
upscale stage with a low first sigma, so the guide's steps add one: LTXVLatentUpsampler x2 on stage 1's
guide-free video latent, LTXVImgToVideoInplace with the first frame, the IC-LoRA guide re-added at full size
(LTXVAddGuide with the template's control images and its GetICLoRAParameters: a factor-2 guide dilated on the
full grid), stage 1's audio, sigmas 0.625, 0.4, 0 through SamplerCustomAdvanced whose CFGGuider samples the
IC-LoRA MODEL through LTX TDP Model Patcher with LTX TDP Tile Config (tile size), LTXVCropGuides, and LTX TDP
Tiled VAE Decode into the template's CreateVideo (ltx_tdp_devkit.iclora_template.add_iclora_stage2).

Tiny stand-ins (ltx_tdp_devkit.tiny_prompts): the tiny LTX-2 transformer and VAE for the LTX-2.3 checkpoint, a
tiny IC-LoRA of it whose metadata says reference_downscale_factor 2 (GetICLoRAParameters reads it), a 9-frame
control video and a first-frame picture. Mocked, since the real ones are many GB: the Gemma text encoder, the
prompt enhancer and its LoRA, and the MoGe depth model (its depth render is replaced by the loaded video's
frames, which become the control images).

Three runs: the stage 2 with the patcher bypassed (unpatched); patched with tiles of at most 224 px (7 latent
cells, minimum overlap 2: 2 x 2 tiles on the 12 x 8-cell stage-2 latent) and `held` audio, a test-only probe
(TDPTestTileProbe) after the patcher recording every tile call: the IC-LoRA guide reaches every tile with real
tokens, and the stage-2 audio equals stage 1's bit for bit; and patched with tiles of 4096 px (1 x 1) and
`average` audio, whose stage-2 video and audio equal the unpatched run's bit for bit.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from ltx_tdp_devkit.iclora_template import (ICLORA_TEMPLATE, ICLoRAStage1, ICLoRAStage2, add_iclora_stage2,
                                            iclora_stage1)
from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.templates import MODE_BYPASSED, api_id, load_template, ltx2_template_ids
from ltx_tdp_devkit.tiny_prompts import build_iclora_files, build_tiny_files, tiny_prompt

pytestmark = [pytest.mark.server, pytest.mark.ltx2]

TILED = {"tile_width": 224, "tile_height": 224, "min_overlap": 2}
"""7 x 7-cell tiles, overlap at least 2: the 12 x 8-cell stage-2 latent resolves to 2 x 2 tiles."""
WHOLE = {"tile_width": 4096, "tile_height": 4096, "min_overlap": 0}
"""Tiles larger than the latent: 1 x 1."""
SEED = 42
GUIDE_SECTION = "## The IC-LoRA template: adding a TDP stage 2"
STAGE2_SIGMAS = "0.625, 0.4, 0.0"


def _require(comfy_dir) -> None:
    if not (comfy_dir / "comfy" / "ldm" / "lightricks" / "av_model.py").is_file():
        pytest.skip(f"the ComfyUI in {comfy_dir} has no LTX-2: its IC-LoRA template cannot run; point COMFYUI_DIR at "
                    "a current ComfyUI")
    if ICLORA_TEMPLATE not in ltx2_template_ids():
        pytest.skip(f"the installed comfyui-workflow-templates has no {ICLORA_TEMPLATE} (ComfyUI 0.33 ships it)")


@pytest.fixture(scope="module")
def frontend(comfy_dir, comfy_server):
    _require(comfy_dir)  # before starting a browser for nothing
    from ltx_tdp_devkit.frontend import browser_page

    with browser_page(comfy_server.url) as page:
        yield page


@pytest.fixture(scope="module")
def names(comfy_dir, comfy_base, model_names) -> dict[str, str]:
    _require(comfy_dir)
    return {**build_tiny_files(comfy_base, model_names), **build_iclora_files(comfy_base)}


def _api(stage: ICLoRAStage1, node_id: int) -> str:
    return api_id(stage.path, node_id)


def _run(comfy_server, comfy_base, api: dict, names: dict, stage: ICLoRAStage1, edit: ICLoRAStage2, folder: str,
         probe: str | None = None) -> dict[str, torch.Tensor]:
    """The API prompt on the tiny models (optionally with the tile probe between patcher and guider); the latents
    entering and leaving stage 2, by name."""
    prompt = tiny_prompt(api, names)
    if probe is not None:
        guider = prompt[_api(stage, edit.guider)]
        prompt["t_tile_probe"] = {"class_type": "TDPTestTileProbe",
                                  "inputs": {"model": guider["inputs"]["model"], "filename": probe}}
        guider["inputs"]["model"] = ["t_tile_probe", 0]
    add_latent_saves(prompt, {"stage1_audio": [_api(stage, stage.separate), 1],
                              "stage2_input": [_api(stage, edit.guide), 2],
                              "stage2_video": [_api(stage, edit.separate), 0],
                              "stage2_audio": [_api(stage, edit.separate), 1]}, folder=folder)
    entry = comfy_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    saved = [k for k, n in prompt.items() if n["class_type"] == "SaveVideo"]
    assert saved and all(entry["outputs"].get(k) for k in saved), f"{folder}: the template saved no video"
    return saved_latents(comfy_base, entry, prompt)


def test_the_guide_has_the_iclora_steps_this_test_follows():
    text = (PACK_ROOT / "docs" / "official-templates.md").read_text()
    assert GUIDE_SECTION in text, f"docs/official-templates.md has no section {GUIDE_SECTION!r}"
    section = text.split(GUIDE_SECTION, 1)[1].split("\n## ", 1)[0]
    for step in ("LTXVLatentUpsampler", "LTXVImgToVideoInplace", "iclora_parameters",
                 f"`ManualSigmas` `{STAGE2_SIGMAS}`", "LTX TDP Model Patcher", "LTX TDP Tile Config (tile size)",
                 "LTXVCropGuides", "LTX TDP Tiled VAE Decode"):
        assert step in section, f"the guide's IC-LoRA steps do not name {step!r}"


def test_iclora_template_with_a_tdp_stage2_holds_the_audio_reaches_every_tile_and_equals_it_at_1x1(
        comfy_dir, comfy_base, comfy_server, frontend, names):
    _require(comfy_dir)
    template = load_template(ICLORA_TEMPLATE)
    stage = iclora_stage1(ICLORA_TEMPLATE, template)
    report = frontend.load(template)
    assert report.load_error is None and not report.missing_types, report
    edit = add_iclora_stage2(frontend, stage, sigmas=STAGE2_SIGMAS)
    frontend.set_widget(stage.path, edit.noise, "noise_seed", SEED)
    for name, value in TILED.items():
        frontend.set_widget(stage.path, edit.tiling, name, value)
    held_api = frontend.graph_to_prompt()
    patcher = _api(stage, edit.patcher)
    assert held_api[patcher]["class_type"] == "LTXTDPModelPatcher" and held_api[patcher]["inputs"]["audio_mode"] == \
        "held", held_api.get(patcher)
    assert held_api[_api(stage, edit.guider)]["inputs"]["model"] == [patcher, 0], "stage 2's CFGGuider is not patched"
    assert held_api[_api(stage, stage.sampler)]["inputs"]["model"][0] != patcher, "stage 1's KSampler is patched"
    guide = held_api[_api(stage, edit.guide)]["inputs"]
    assert guide["iclora_parameters"] == [_api(stage, stage.iclora_parameters), 0], guide
    assert held_api[_api(stage, edit.decode)]["inputs"]["samples"] == [_api(stage, edit.crop_guides), 2]
    assert _api(stage, stage.video_decode) not in held_api, "stage 1's video decode is still in the prompt"

    for name, value in WHOLE.items():
        frontend.set_widget(stage.path, edit.tiling, name, value)
    frontend.set_widget(stage.path, edit.patcher, "audio_mode", "average")
    whole_api = frontend.graph_to_prompt()
    frontend.set_mode(stage.path, edit.patcher, MODE_BYPASSED)
    unpatched_api = frontend.graph_to_prompt()
    assert patcher not in unpatched_api and unpatched_api[_api(stage, edit.guider)]["inputs"]["model"] == \
        [_api(stage, stage.iclora_model), 0], "the bypassed patcher is still between the IC-LoRA and the guider"

    unpatched = _run(comfy_server, comfy_base, unpatched_api, names, stage, edit, "iclora_unpatched")
    log_before = len(comfy_server.log_text())
    held = _run(comfy_server, comfy_base, held_api, names, stage, edit, "iclora_held", probe="iclora_tiles.jsonl")
    log = comfy_server.log_text()[log_before:]
    whole = _run(comfy_server, comfy_base, whole_api, names, stage, edit, "iclora_average_1x1")

    assert not re.findall(r"LTX TDP: the first sigma is", log), "stage 2 starts at 0.625: no drift warning expected"
    calls = [json.loads(line) for line in (comfy_base / "output" / "iclora_tiles.jsonl").read_text().splitlines()]
    tiles = {tuple(c["video"][2:]) for c in calls}
    assert len(calls) and len(calls) % 4 == 0 and tiles == {(4, 7, 7)}, (
        f"{len(calls)} tile calls of latents {sorted(tiles)}: expected whole 2 x 2 passes of 2 video + 2 guide "
        "frames, 7 x 7 cells")
    for c in calls:
        (entry,) = c["entries"]
        (frames, rows, cols), pre_filter = entry
        assert c["guide_tokens"] == pre_filter == 2 * 49 and frames == 2 and rows * cols >= 9, (
            f"a tile did not get the IC-LoRA guide's real tokens under it: {c}")
        assert c["kept_guide_tokens"] == frames * rows * cols, f"its entry does not describe the kept tokens: {c}"

    stage1, audio = held["stage1_audio"], held["stage2_audio"]
    assert int(torch.count_nonzero(stage1)) > 0, "stage 1 generated no audio"
    assert audio.shape == stage1.shape and torch.equal(audio, stage1), (
        f"held: the stage-2 audio differs from stage 1's by up to {(audio - stage1).abs().max():.3e}")
    moved = (held["stage2_video"] - held["stage2_input"]).abs().max().item()
    assert moved > 1e-3, f"held: stage 2 left the video as it was (max change {moved:.3e})"
    assert torch.equal(unpatched["stage1_audio"], stage1), "stage 1 differs between the runs: the comparison is void"
    for part in ("stage2_video", "stage2_audio"):
        got, want = whole[part], unpatched[part]
        assert got.shape == want.shape and torch.equal(got, want), (
            f"1x1 average: {part} differs from the unpatched stage 2's by up to {(got - want).abs().max():.3e}")
    assert not torch.equal(held["stage2_video"], unpatched["stage2_video"]), "2 x 2 tiles changed nothing"
