"""The example workflows as a user gets them: opened in ComfyUI's own frontend, queued, run.

Each workflow is shaped like ComfyUI's own templates: one subgraph node whose face carries the parameters a user
changes, notes naming the model files, and a thumbnail for the template browser. The frontend the server under test
ships (headless Chromium, one browser for the module) loads each workflow and makes its API prompt with its own
`graphToPrompt`, as the Queue button does:

- the workflow loads with no missing node type, no load error and no console error, and its prompt equals the API twin
  in tests/example_workflows/api/ (the frontend's conversion on ComfyUI 0.33.0; inputs the server does not declare are
  left out of the comparison);
- every parameter on the face reaches the inner inputs it is linked to: changed on the face, the inner node's value
  changes in the prompt;
- the prompt runs to the end over POST /prompt on the tiny models (ltx_tdp_devkit.tiny_prompts says what it changes);
- the template browser lists every example and fetches its thumbnail from the pack.

With LTX_TDP_WRITE_EXAMPLE_ASSETS=1 the twin test writes the twins instead of checking them, and
test_example_thumbnails.py writes the thumbnails; run it on ComfyUI 0.33.0, which has every node the examples use.

Where the runtime lacks a workflow's nodes the tests skip with the reason: the LTX-2.5 workflows (marked `ltx25`) below
ComfyUI 0.32, the LTX-2 ones on ComfyUI 0.3.75, which has only LTX-Video. ComfyUI 0.3.75's frontend (1.32) loads,
converts and runs the LTX-Video ones like the current frontend.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import requests

from ltx_tdp_devkit.paths import API_WORKFLOWS, PACK_ROOT, comfyui_has_ltx25
from ltx_tdp_devkit.server import PACK_DIR_NAME, output_images
from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt
from ltx_tdp_devkit.workflow_format import (UI_WORKFLOWS, all_nodes, face, load, missing_node_types, notes,
                                            prompt_core, subgraph_node, thumbnail_path, twin_path,
                                            ui_workflows, write_twin)

pytestmark = pytest.mark.server

PACK_PREFIX = "LTXTDP"
SCREENSHOTS = PACK_ROOT / "artifacts" / "screenshots"
WRITE_ASSETS = os.environ.get("LTX_TDP_WRITE_EXAMPLE_ASSETS") == "1"

MODELS_25 = ["unet_name", "video_vae", "audio_vae", "text_encoder", "upscale_model"]
MODELS_2 = ["ckpt_name", "text_encoder", "upscale_model"]
TWO_STAGE_25 = ["prompt", "width", "height", "duration", "frame_rate", "seed", "height_tiles", "width_tiles"]
TWO_STAGE_2 = ["prompt", "width", "height", "frames", "seed", "height_tiles", "width_tiles"]
FACES = {
    "ltx25_tdp_4k_two_stage": TWO_STAGE_25 + MODELS_25,
    "ltx25_tdp_4k_two_stage_multigpu": TWO_STAGE_25 + ["gpus"] + MODELS_25,
    "ltx25_tdp_4k_video_upscale": ["video", "prompt", "start_time", "duration", "width", "height", "seed",
                                   "height_tiles", "width_tiles"] + MODELS_25,
    "ltx2_tdp_4k_two_stage": TWO_STAGE_2 + MODELS_2,
    "ltx2_tdp_4k_two_stage_multigpu": TWO_STAGE_2 + ["ranks"] + MODELS_2,
    "ltxv_tdp_upscale": ["prompt", "width", "height", "frames", "seed", "height_tiles", "width_tiles", "ckpt_name",
                         "clip_name"],
    "ltx_tiled_vae_decode": ["latent", "ckpt_name", "spatial_tile", "temporal_tile", "quality"],
}
"""The parameters on each example's face, in order (docs/example-workflows.md describes them)."""

INPUT_FILES = {"LoadVideo": "video", "LoadLatent": "latent"}
"""Root-canvas loaders of a user's file (its name is their first widget value): node type -> tiny file role."""


def _marks(stem: str) -> list:
    if stem.startswith("ltx25"):
        return [pytest.mark.ltx2, pytest.mark.ltx25]
    return [pytest.mark.ltx2] if stem.startswith("ltx2") else []


WORKFLOWS = ui_workflows()
PARAMS = [pytest.param(p, id=p.stem, marks=_marks(p.stem)) for p in WORKFLOWS]


@pytest.fixture(scope="module")
def server_facts(comfy_server) -> dict:
    return {"object_info": comfy_server.get("/object_info"),
            "version": comfy_server.get("/system_stats")["system"].get("comfyui_version", "unknown")}


@pytest.fixture(scope="module")
def tiny_files(comfy_dir: Path, comfy_base: Path, model_names: dict[str, str]) -> dict[str, str]:
    """File names of every tiny model and input the examples load, by role, built once."""
    names = build_tiny_files(comfy_base, model_names)
    if comfyui_has_ltx25(comfy_dir):
        from ltx_tdp_devkit.ltx25_files import build_ltx25_files

        names.update(build_ltx25_files(comfy_base))
    return names


@pytest.fixture(scope="module")
def frontend(comfy_server):
    from ltx_tdp_devkit.frontend import browser_page

    with browser_page(comfy_server.url) as page:
        yield page


def _require_nodes(path: Path, comfy_dir: Path, facts: dict) -> dict:
    """The workflow, or a skip naming what this ComfyUI lacks for it."""
    workflow = load(path)
    if path.stem.startswith("ltx25") and not comfyui_has_ltx25(comfy_dir):
        pytest.skip(f"{LTX25_SKIP_REASON}: ComfyUI {facts['version']} cannot run {path.name}")
    missing = missing_node_types(workflow, facts["object_info"])
    assert not [t for t in missing if t.startswith(PACK_PREFIX)], f"the pack's own nodes are missing: {missing}"
    if missing:
        pytest.skip(f"ComfyUI {facts['version']} lacks {', '.join(missing)} (LTX-2 nodes); run with a current ComfyUI")
    return workflow


def _open(frontend, workflow: dict, comfy_base: Path, tiny: dict[str, str]):
    """Load the workflow in the frontend with the files its loaders name present in ComfyUI's input folder (as a
    user's own clip would be: the frontend fetches a Load Video's file to preview it)."""
    for node in workflow["nodes"]:
        if node["type"] in INPUT_FILES:
            role = INPUT_FILES[node["type"]]
            link = comfy_base / "input" / node["widgets_values"][0]
            if role in tiny and not link.exists():
                link.symlink_to(comfy_base / "input" / tiny[role])
    return frontend.load(workflow)


@pytest.mark.parametrize("path", PARAMS)
def test_each_example_is_one_subgraph_node_with_the_parameters_a_user_changes(path):
    workflow = load(path)
    node = subgraph_node(workflow)
    parameters = face(workflow)
    assert [p.label for p in parameters] == FACES[path.stem], f"{path.name}: the face of node {node['id']}"
    for p in parameters:
        assert p.targets, f"{path.name}: face parameter {p.label} is linked to no node inside"
        assert p.is_widget or p.type in ("VIDEO", "LATENT"), f"{path.name}: {p.label} shows no widget on the face"


@pytest.mark.parametrize("path", PARAMS)
def test_each_example_says_what_to_download_and_where(path):
    workflow = load(path)
    text = "\n".join(notes(workflow))
    assert text, f"{path.name} has no note"
    assert "ComfyUI/models/" in text, f"{path.name}: the notes name no model folder"
    assert "huggingface.co/" in text, f"{path.name}: the notes name no download"
    values = [p.value for p in face(workflow)]
    values += [v for n in all_nodes(workflow) for v in (n.get("widgets_values") or []) if n["type"] != "MarkdownNote"]
    files = {v for v in values if isinstance(v, str) and v.endswith(".safetensors")}
    assert files, f"{path.name} loads no model file"
    for value in sorted(files):
        assert value in text, f"{path.name}: {value} is loaded but the notes do not say where to get it"


LOADERS = ("UNETLoader", "VAELoader", "CLIPLoader", "LatentUpscaleModelLoader")
"""The loaders of LTX-2.5's split files, as ComfyUI's own LTX-2.5 templates have them."""


def _loaded_files(workflow: dict) -> set[tuple[str, str]]:
    return {(n["type"], n["widgets_values"][0]) for n in all_nodes(workflow) if n["type"] in LOADERS}


@pytest.mark.parametrize("path", [p for p in PARAMS if p.id.startswith("ltx25")])
def test_ltx25_examples_load_the_files_comfyuis_own_ltx25_template_loads(path, comfy_dir):
    from ltx_tdp_devkit.templates import load_template, ltx2_template_ids

    if not comfyui_has_ltx25(comfy_dir) or "video_ltx2_5_t2v" not in ltx2_template_ids():
        pytest.skip(f"{LTX25_SKIP_REASON}: this ComfyUI's templates package has no video_ltx2_5_t2v to compare with")
    ours, official = _loaded_files(load(path)), _loaded_files(load_template("video_ltx2_5_t2v"))
    assert {kind for kind, _ in ours} == set(LOADERS), f"{path.name} loads {sorted(ours)}"
    assert ours <= official, f"{path.name} loads {sorted(ours - official)}, which video_ltx2_5_t2v does not"


@pytest.mark.parametrize("path", PARAMS)
def test_example_loads_in_the_real_frontend_and_converts_to_its_twin(path, comfy_dir, comfy_base, comfy_server,
                                                                     frontend, server_facts, tiny_files):
    workflow = _require_nodes(path, comfy_dir, server_facts)
    report = _open(frontend, workflow, comfy_base, tiny_files)
    shot = frontend.screenshot(SCREENSHOTS / f"comfyui-{server_facts['version']}" / f"{path.stem}.png")

    assert report.load_error is None, f"{path.name}: loadGraphData failed: {report.load_error}"
    assert not report.missing_types, f"{path.name}: node types the frontend does not know: {report.missing_types}"
    assert not report.missing_dialog, f"{path.name}: the frontend reported missing nodes: {report.missing_dialog}"
    assert not report.console_errors, f"{path.name}: console errors while loading: {report.console_errors}"
    assert sorted(report.node_types) == sorted(n["type"] for n in workflow["nodes"]), (
        f"{path.name}: the canvas holds {sorted(report.node_types)}")
    assert shot.stat().st_size > 10_000, f"screenshot {shot} looks empty"

    prompt = frontend.graph_to_prompt()
    if WRITE_ASSETS:
        write_twin(path, prompt)
    info = server_facts["object_info"]
    built, twin = prompt_core(prompt, info), prompt_core(load(twin_path(path)), info)
    assert built == twin, (f"{path.name}: the frontend's prompt differs from the twin in nodes "
                           f"{sorted(k for k in set(built) | set(twin) if built.get(k) != twin.get(k))}")


def _changed(value):
    """Another value for a face widget, as a user would type or pick it (64 is a whole step of every integer widget
    on the faces: sizes step by 32, frames by 8; the frontend clamps what exceeds a maximum)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 64
    if isinstance(value, float):
        return value + 0.5
    return f"changed {value}"


@pytest.mark.parametrize("path", PARAMS)
def test_every_face_parameter_reaches_the_inner_inputs_it_is_linked_to(path, comfy_dir, comfy_base, frontend,
                                                                      server_facts, tiny_files):
    workflow = _require_nodes(path, comfy_dir, server_facts)
    report = _open(frontend, workflow, comfy_base, tiny_files)
    assert report.load_error is None, report
    node = subgraph_node(workflow)["id"]
    widgets = [p for p in face(workflow) if p.is_widget]
    before = frontend.graph_to_prompt()
    applied = {p.name: frontend.set_widget((), node, p.name, _changed(p.value)) for p in widgets}
    after = frontend.graph_to_prompt()
    for p in widgets:
        assert applied[p.name] != p.value, f"{path.name}: the face widget {p.label} kept {p.value!r}"
        for inner, name in p.targets:
            key = f"{node}:{inner}"
            assert before[key]["inputs"][name] == p.value, (
                f"{path.name}: {before[key]['class_type']}.{name} is {before[key]['inputs'][name]!r} before the change, "
                f"the face shows {p.value!r}")
            assert after[key]["inputs"][name] == applied[p.name], (
                f"{path.name}: {p.label} = {applied[p.name]!r} on the face, {after[key]['class_type']}.{name} = "
                f"{after[key]['inputs'][name]!r} in the prompt")


@pytest.mark.parametrize("path", PARAMS)
def test_example_runs_to_the_end_on_the_tiny_models(path, comfy_dir, comfy_base, comfy_server, frontend, server_facts,
                                                    tiny_files):
    workflow = _require_nodes(path, comfy_dir, server_facts)
    report = _open(frontend, workflow, comfy_base, tiny_files)
    assert report.load_error is None, report
    prompt = tiny_prompt(frontend.graph_to_prompt(), tiny_files)
    log_before = len(comfy_server.log_text())
    entry = comfy_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    drift = re.findall(r"LTX TDP: the first sigma is [0-9.]+", comfy_server.log_text()[log_before:])
    assert not drift, f"{path.name}: the TDP stage starts above the patcher's drift threshold: {drift}"
    outputs = entry.get("outputs", {})
    saved = [k for k, n in prompt.items() if n["class_type"] in ("SaveVideo", "SaveWEBM")]
    assert len(saved) == 1, f"{path.name} should save one video, saves {saved}"
    videos = output_images({"outputs": {saved[0]: outputs.get(saved[0], {})}})
    assert videos, f"{prompt[saved[0]]['class_type']} (node {saved[0]}) wrote nothing: {outputs}"
    previews = [k for k, n in prompt.items() if n["class_type"] == "LTXTDPTilePreview"]
    pictures = [output_images({"outputs": {k: outputs.get(k, {})}}) for k in previews]
    assert all(pictures), f"{path.name}: the tile preview showed no image: {outputs}"
    if "LTXTDPModelPatcher" in {n["class_type"] for n in prompt.values()}:
        assert previews, f"{path.name} patches a model but shows no tile layout"


def test_every_example_has_its_twin_and_thumbnail():
    names = {p.stem for p in WORKFLOWS}
    assert names == set(FACES), f"examples without a face described here, or described but gone: {names ^ set(FACES)}"
    twins = {p.stem for p in API_WORKFLOWS.glob("*.json")}
    assert twins == names, f"twins without a UI workflow or UI workflows without a twin: {twins ^ names}"
    for path in WORKFLOWS:
        thumb = thumbnail_path(path)
        assert thumb.is_file(), f"{path.name} has no thumbnail {thumb.name}"
        assert thumb.read_bytes()[:3] == b"\xff\xd8\xff", f"{thumb.name} is not a JPEG (the frontend asks for .jpg)"


def test_the_template_browser_lists_every_example(comfy_server):
    templates = comfy_server.get("/workflow_templates")
    listed = set(templates.get(PACK_DIR_NAME, []))
    assert listed == {p.stem for p in WORKFLOWS}, f"GET /workflow_templates lists {templates}"


def test_the_template_browser_fetches_each_thumbnail_from_the_pack(comfy_server, frontend):
    names = sorted(p.stem for p in WORKFLOWS)
    fetched = frontend.template_thumbnails(PACK_DIR_NAME, len(names))
    for stem in names:
        url = f"{comfy_server.url}/api/workflow_templates/{PACK_DIR_NAME}/{stem}.jpg"
        assert fetched.get(url) == 200, f"the template browser's request for {url}: {fetched.get(url)} (all: {fetched})"
        served = requests.get(url, timeout=30)
        assert served.headers["Content-Type"] == "image/jpeg", served.headers
        assert served.content == thumbnail_path(UI_WORKFLOWS / f"{stem}.json").read_bytes(), f"{url} is not {stem}.jpg"
