"""The example workflows: each API twin is exactly what the frontend makes of its UI workflow, and each runs
to success over POST /prompt on the tiny models.

To run on the tiny models the test changes the twin, and only so:
- model files are mapped to the tiny ones: the checkpoint loader becomes UNETLoader (tiny LTX-Video or
  LTX-2 transformer) plus TDPTestVAELoader (tiny video VAE, the checkpoint's VAE output); the LTX-2 audio
  VAE, the latent upscaler and the saved latent are tiny files of the same format;
- the text encoder is replaced by TDPTestRandomConditioning (real LTX text encoders are many GB): the
  loader goes away and every CLIPTextEncode becomes a seeded random conditioning;
- sizes shrink (video 192 x 128 x 9 frames at stage 1, decode tiles of 128 px, 3 stage-1 scheduler steps,
  tile overlaps of 2 latent cells, a 2-rank CPU group) so that a prompt takes seconds on a CPU.
Everything else (nodes, links, samplers, sigmas, TDP settings) runs as the user gets it.

Workflows that need LTX-2 nodes are skipped, with the missing nodes named, on a runtime without them
(ComfyUI 0.3.75); `COMFYUI_DIR=<ComfyUI 0.24.0> bash scripts/test.sh tests/example_workflows` runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltx_tdp_devkit.server import output_images
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt
from ltx_tdp_devkit.workflow_format import FRONTEND_ONLY, load, missing_node_types, twin_path, ui_to_api, ui_workflows

pytestmark = pytest.mark.server

PACK_PREFIX = "LTXTDP"


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


WORKFLOWS = ui_workflows()


@pytest.fixture(scope="module")
def object_info(comfy_server) -> dict:
    return comfy_server.get("/object_info")


def _skip_unless_runtime_has_nodes(workflow: dict, object_info: dict, comfy_server) -> None:
    missing = missing_node_types(workflow, object_info)
    ours = [t for t in missing if t.startswith(PACK_PREFIX)]
    assert not ours, f"the pack's own nodes are missing from the server: {ours}"
    if missing:
        version = comfy_server.get("/system_stats")["system"].get("comfyui_version", "?")
        pytest.skip(f"ComfyUI {version} lacks {', '.join(missing)} (LTX-2 nodes); run with a current ComfyUI")


def test_there_are_four_examples_each_with_a_twin():
    names = {p.stem for p in WORKFLOWS}
    assert {"ltx2_tdp_4k_two_stage", "ltx2_tdp_4k_two_stage_multigpu", "ltxv_tdp_upscale",
            "ltx_tiled_vae_decode"} <= names, names
    twins = {p.stem for p in twin_path(WORKFLOWS[0]).parent.glob("*.json")}
    assert twins == names, f"twins without a UI workflow or UI workflows without a twin: {twins ^ names}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=_ids(WORKFLOWS))
def test_each_example_says_what_to_download_and_where(path):
    workflow = load(path)
    notes = [n["widgets_values"][0] for n in workflow["nodes"] if n["type"] in FRONTEND_ONLY and n.get("widgets_values")]
    text = "\n".join(notes)
    assert notes, f"{path.name} has no note"
    assert "ComfyUI/models/" in text and "huggingface.co/" in text, f"{path.name}: the notes name no download"
    for node in workflow["nodes"]:
        for value in node.get("widgets_values") or []:
            if isinstance(value, str) and value.endswith(".safetensors"):
                assert value in text, f"{path.name}: {value} is loaded but the notes do not say where to get it"


@pytest.mark.parametrize("path", WORKFLOWS, ids=_ids(WORKFLOWS))
def test_api_twin_equals_the_conversion_of_its_ui_workflow(path, object_info, comfy_server):
    workflow = load(path)
    _skip_unless_runtime_has_nodes(workflow, object_info, comfy_server)
    twin = load(twin_path(path))
    converted = ui_to_api(workflow, object_info)
    assert set(converted) == set(twin), f"node ids differ: {sorted(set(converted) ^ set(twin))}"
    for node_id, node in converted.items():
        assert node == twin[node_id], (f"{path.name} node {node_id} ({node['class_type']}):\n"
                                       f" converted {json.dumps(node)}\n twin      {json.dumps(twin[node_id])}")


@pytest.fixture(scope="module")
def tiny_files(comfy_base: Path, model_names: dict[str, str]) -> dict[str, str]:
    """File names of every tiny model the workflows need, by role, built once."""
    return build_tiny_files(comfy_base, model_names)


@pytest.mark.parametrize("path", WORKFLOWS, ids=_ids(WORKFLOWS))
def test_api_twin_runs_to_success_on_the_tiny_models(path, object_info, comfy_server, tiny_files):
    workflow = load(path)
    _skip_unless_runtime_has_nodes(workflow, object_info, comfy_server)
    prompt = tiny_prompt(load(twin_path(path)), tiny_files)
    entry = comfy_server.run(prompt, timeout=600)
    assert entry["status"]["status_str"] == "success", entry["status"]
    outputs = entry.get("outputs", {})
    saved = [node_id for node_id, node in prompt.items() if node["class_type"] in ("SaveVideo", "SaveWEBM")]
    assert saved, "the workflow saves no video"
    for node_id in saved:
        assert outputs.get(node_id), f"{prompt[node_id]['class_type']} (node {node_id}) wrote nothing: {outputs}"
    previews = [node_id for node_id, node in prompt.items() if node["class_type"] == "LTXTDPTilePreview"]
    for node_id in previews:
        assert output_images({"outputs": {node_id: outputs.get(node_id, {})}}), "the tile preview showed no image"


def test_the_template_browser_lists_every_example(comfy_server):
    from ltx_tdp_devkit.server import PACK_DIR_NAME

    templates = comfy_server.get("/workflow_templates")
    listed = set(templates.get(PACK_DIR_NAME, []))
    assert listed == {p.stem for p in WORKFLOWS}, f"GET /workflow_templates lists {templates}"
