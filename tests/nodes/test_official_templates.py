"""ComfyUI's own LTX-2 templates with TDP added the way the guide says ("Adding TDP to ComfyUI's own LTX-2
templates"), read at test time from the `comfyui-workflow-templates` package that the ComfyUI under test
installs (never copied into this repository).

- Every LTX-2 template in the package is in the guide, and each two-stage one still has the stage-2 shape
  the instructions rely on (a SamplerCustomAdvanced after LTXVLatentUpsampler, guided by its own CFGGuider or
  LTXVDualCFGGuider, its result split by LTXVSeparateAVLatent into one video decode and LTXVAudioVAEDecode),
  with the guider, sampler output and decode the guide's table names: a new or changed template fails here,
  not silently. Templates that sample nothing locally (hosted API models) are listed apart.
- `video_ltx2_t2v_distilled` (a subgraph that passes stage 2's `denoised_output` on) is edited in ComfyUI's
  real frontend in headless Chromium, as a user following the guide does: patcher + tile config on stage 2's
  CFGGuider, the tiled decode in place of stage 2's VAEDecodeTiled. The frontend's own `graphToPrompt`
  flattens the subgraph into the API prompt (no converter of ours re-implements subgraphs, bypassed nodes
  and promoted widgets), which runs over `POST /prompt` on the tiny models (ltx_tdp_devkit.tiny_prompts: the
  only changes are model files, text encoder and sizes). The stage-2 audio must equal the stage-1 audio
  bit for bit. The screenshot of the edited subgraph is the guide's (docs/).

On a ComfyUI without LTX-2 (0.3.75) these skip with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.templates import (LTX2_TEMPLATE, Stage2, TemplateShapeError, add_tdp_to_stage2, api_id,
                               has_local_sampler, load_template, ltx2_template_ids, stage2,
                               templates_package_version)
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt

pytestmark = [pytest.mark.server, pytest.mark.ltx2]

GUIDE = PACK_ROOT / "docs" / "official-templates.md"
GUIDE_SECTION = "## Adding TDP to ComfyUI's own LTX templates"
RUN_TEMPLATE = "video_ltx2_t2v_distilled"
SCREENSHOTS = PACK_ROOT / "artifacts" / "screenshots"
DOCS_SCREENSHOT = PACK_ROOT / "docs" / "ltx2_template_stage2_tdp.png"
TEMPLATE_IDS = ltx2_template_ids()

_ROW = re.compile(r"^\| `(?P<id>[\w.-]+)` \| `(?P<guider>\w+)` \| `(?P<output>\w+)` \| `(?P<decode>\w+)` \|", re.M)
_SINGLE = re.compile(r"^\*\*Single-stage\*\*(?P<text>.*?)(?:\n\n|\Z)", re.M | re.S)
_API = re.compile(r"^\*\*API\*\*(?P<text>.*?)(?:\n\n|\Z)", re.M | re.S)


def _require_ltx2(comfy_dir: Path) -> None:
    if not (comfy_dir / "comfy" / "ldm" / "lightricks" / "av_model.py").is_file():
        pytest.skip(f"the ComfyUI in {comfy_dir} has no LTX-2 (comfy/ldm/lightricks/av_model.py): its official "
                    "LTX-2 templates cannot run; point COMFYUI_DIR at a current ComfyUI")
    if not TEMPLATE_IDS:
        pytest.skip(f"comfyui-workflow-templates {templates_package_version()} holds no LTX-2 template")


def _guide_section() -> str:
    text = GUIDE.read_text()
    assert GUIDE_SECTION in text, f"{GUIDE.name} has no section {GUIDE_SECTION!r}"
    section = text.split(GUIDE_SECTION, 1)[1]
    return section.split("\n## ", 1)[0]


def guide_table() -> dict[str, tuple[str, str, str]]:
    """template id -> (stage-2 guider, sampler output, video decode to swap), as the guide's table lists them."""
    return {m["id"]: (m["guider"], m["output"], m["decode"]) for m in _ROW.finditer(_guide_section())}


def _listed(pattern: re.Pattern, what: str) -> set[str]:
    match = pattern.search(_guide_section())
    assert match, f"the guide's section has no **{what}** paragraph"
    return {t for t in re.findall(r"`([\w.-]+)`", match["text"]) if LTX2_TEMPLATE.search(t)}


def guide_templates_version() -> str:
    """The `comfyui-workflow-templates` version whose templates the guide lists (older ones have fewer)."""
    match = re.search(r"The lists are those of `comfyui-workflow-templates` ([0-9.]+)", _guide_section())
    assert match, "the guide's section does not say which comfyui-workflow-templates version it lists"
    return match[1]


def _version_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version or "0"))


def guide_single_stage() -> set[str]:
    return _listed(_SINGLE, "Single-stage")


def guide_api() -> set[str]:
    return _listed(_API, "API")


def test_the_guide_lists_every_ltx2_template_of_the_installed_package_once(comfy_dir):
    _require_ltx2(comfy_dir)
    table, single, api = guide_table(), guide_single_stage(), guide_api()
    listed = set(table) | single | api
    version = templates_package_version()
    for a, b in ((set(table), single), (set(table), api), (single, api)):
        assert not a & b, f"listed twice (table, single-stage, API): {sorted(a & b)}"
    assert set(TEMPLATE_IDS) - listed == set(), (
        f"comfyui-workflow-templates {version} has LTX-2 templates the guide does not cover: "
        f"{sorted(set(TEMPLATE_IDS) - listed)}")
    shot = DOCS_SCREENSHOT.relative_to(GUIDE.parent).as_posix()
    assert f"]({shot})" in _guide_section() and DOCS_SCREENSHOT.is_file(), f"the guide's screenshot {shot} is missing"
    if _version_tuple(version) >= _version_tuple(guide_templates_version()):
        assert listed - set(TEMPLATE_IDS) == set(), (
            f"the guide names templates that comfyui-workflow-templates {version} no longer has: "
            f"{sorted(listed - set(TEMPLATE_IDS))}")


@pytest.mark.parametrize("template_id", TEMPLATE_IDS or ["(no LTX-2 template installed)"])
def test_template_still_has_the_stage2_shape_the_guide_describes(comfy_dir, template_id):
    _require_ltx2(comfy_dir)
    try:
        stage = stage2(template_id, load_template(template_id))
    except TemplateShapeError as e:
        pytest.fail(f"the guide's instructions no longer fit: {e}")
    if stage is None:
        if not has_local_sampler(load_template(template_id)):
            assert template_id in guide_api(), (
                f"{template_id} samples nothing locally (a hosted API model), but the guide does not list it "
                "under **API**")
            return
        assert template_id in guide_single_stage(), (
            f"{template_id} has no sampler after an LTXVLatentUpsampler (single-stage), but the guide does not "
            "list it as single-stage")
        return
    row = guide_table().get(template_id)
    assert row is not None, f"{template_id} is two-stage but not in the guide's table"
    found = (stage.guider_type, stage.output, stage.video_decode_type)
    assert found == row, (f"{template_id}: stage 2 ({stage.subgraph_name!r}, sampler {stage.sampler}) is guided by "
                          f"{found[0]}, passes on {found[1]} and decodes its video with {found[2]}; the guide says "
                          f"{row}")
    assert stage.path, f"{template_id}: stage 2 is on the root graph, the guide says it is inside a subgraph"
    assert stage.first_sigma is not None and stage.first_sigma < 1.0, (
        f"{template_id}: stage 2 starts at sigma {stage.first_sigma}, not an upscale stage below 1")


@pytest.fixture(scope="module")
def frontend(comfy_dir, comfy_server):
    _require_ltx2(comfy_dir)  # before starting a browser for nothing
    from ltx_tdp_devkit.frontend import browser_page

    with browser_page(comfy_server.url) as page:
        yield page


def _api(stage: Stage2, node_id: int) -> str:
    return api_id(stage.path, node_id)


def test_official_template_with_tdp_on_stage2_keeps_the_stage1_audio_bit_for_bit(
        comfy_dir, comfy_base, model_names, comfy_server, frontend):
    _require_ltx2(comfy_dir)
    template = load_template(RUN_TEMPLATE)
    stage = stage2(RUN_TEMPLATE, template)
    assert stage is not None and stage.path, f"{RUN_TEMPLATE}: stage 2 is not inside a subgraph"
    assert stage.output == "denoised_output", f"{RUN_TEMPLATE} passes on stage 2's {stage.output}"

    report = frontend.load(template)
    assert report.load_error is None and not report.missing_types, report
    edit = add_tdp_to_stage2(frontend, stage)
    frontend.open_subgraph(stage.path)
    shown = [stage.guider, stage.sampler, stage.separate, stage.audio_decode, edit.tiling, edit.patcher, edit.decode]
    version = comfy_server.get("/system_stats")["system"].get("comfyui_version", "unknown")
    shot = frontend.screenshot_region(SCREENSHOTS / f"comfyui-{version}" / f"{RUN_TEMPLATE}_tdp_stage2.png",
                                      frontend.node_bounds(stage.path, shown))
    assert shot.stat().st_size > 50_000, f"screenshot {shot} looks empty ({shot.stat().st_size} bytes)"

    api = frontend.graph_to_prompt()
    patcher = _api(stage, edit.patcher)
    assert api[patcher]["class_type"] == "LTXTDPModelPatcher", api.get(patcher)
    assert api[_api(stage, stage.guider)]["inputs"]["model"] == [patcher, 0], "stage 2's CFGGuider is not patched"
    for guider in stage.stage1_guiders:
        assert api[_api(stage, guider)]["inputs"]["model"][0] != patcher, f"stage 1's CFGGuider {guider} is patched"
    assert api[_api(stage, edit.decode)]["inputs"]["samples"] == [_api(stage, stage.separate), 0]
    assert _api(stage, stage.video_decode) not in api, "the template's own video decode is still in the prompt"

    prompt = tiny_prompt(api, build_tiny_files(comfy_base, model_names))
    add_latent_saves(prompt, {"stage1_audio": [_api(stage, stage.audio_in[0]), stage.audio_in[1]],
                              "upscaled_video": [_api(stage, stage.video_in[0]), stage.video_in[1]],
                              "stage2_audio": [_api(stage, stage.separate), 1],
                              "stage2_video": [_api(stage, stage.separate), 0]}, folder=RUN_TEMPLATE)
    log_before = len(comfy_server.log_text())
    entry = comfy_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    saved_videos = [k for k, n in prompt.items() if n["class_type"] == "SaveVideo"]
    assert saved_videos and all(entry["outputs"].get(k) for k in saved_videos), "the template saved no video"

    log = comfy_server.log_text()[log_before:]
    warned = re.findall(r"LTX TDP: the first sigma is ([0-9]+\.[0-9]+)", log)
    assert warned == [f"{stage.first_sigma:.3f}"], (
        f"the patcher should run on stage 2 only (first sigma {stage.first_sigma}); its sigma warnings: {warned}")

    latents = saved_latents(comfy_base, entry, prompt)
    stage1, audio = latents["stage1_audio"], latents["stage2_audio"]
    assert int(torch.count_nonzero(stage1)) > 0, "stage 1 generated no audio"
    assert audio.shape == stage1.shape, f"audio shape {tuple(audio.shape)} vs stage 1's {tuple(stage1.shape)}"
    assert torch.equal(audio, stage1), (
        f"the stage-2 audio ({stage.output}) differs from stage 1's by up to {(audio - stage1).abs().max():.3e}")
    moved = (latents["stage2_video"] - latents["upscaled_video"]).abs().max().item()
    assert moved > 1e-3, f"stage 2 left the video as it was (max change {moved:.3e})"
