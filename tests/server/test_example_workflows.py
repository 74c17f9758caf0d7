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
(ComfyUI 0.3.75); `COMFYUI_DIR=<ComfyUI 0.24.0> bash scripts/test.sh tests/server` runs them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from support.server import output_images
from support.workflow_format import FRONTEND_ONLY, load, missing_node_types, twin_path, ui_to_api, ui_workflows

pytestmark = pytest.mark.server

PACK_PREFIX = "LTXTDP"

TINY_FILES = {
    "audio_vae": "checkpoints/tdp_tiny_ltx2_audio_vae.safetensors",
    "upsampler": "latent_upscale_models/tdp_tiny_latent_upsampler.safetensors",
}
TINY_LATENT = "tdp_tiny_video.latent"

STAGE1_SIZE = {"width": 192, "height": 128, "length": 9}
DECODE_TILES = {"spatial_tile": 128, "spatial_overlap": 32}
GROUP_RANKS = 2


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
    from support import tiny_workflow_models as tiny

    models = comfy_base / "models"
    names = dict(model_names)
    if tiny.has_ltx2_audio():
        names["audio_vae"] = tiny.build_ltx2_audio_vae(models / TINY_FILES["audio_vae"]).name
    if tiny.has_ltx_latent_upsampler():
        names["upsampler"] = tiny.build_latent_upsampler(models / TINY_FILES["upsampler"]).name
    latent = torch.randn(1, 128, 2, 8, 12, generator=torch.Generator().manual_seed(5))
    names["latent"] = tiny.write_latent(comfy_base / "input" / TINY_LATENT, latent).name
    return names


def tiny_prompt(twin: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The twin with model files, text encoders and sizes mapped to the tiny models (see module docstring)."""
    prompt = copy.deepcopy(twin)
    kinds = {n["class_type"] for n in prompt.values()}
    ltx2 = "LTXAVTextEncoderLoader" in kinds or "LTXVConcatAVLatent" in kinds
    context_dim = 32 if ltx2 else 16  # tiny LTX-2 takes text through its connectors: 2 x caption_channels
    renames: dict[tuple[str, int], list] = {}
    for node_id, node in list(prompt.items()):
        kind, inputs = node["class_type"], node["inputs"]
        if kind == "CheckpointLoaderSimple":
            prompt[node_id] = {"class_type": "UNETLoader",
                               "inputs": {"unet_name": names["ltxav" if ltx2 else "ltxv"], "weight_dtype": "default"}}
            prompt[f"{node_id}_vae"] = {"class_type": "TDPTestVAELoader", "inputs": {"vae_name": names["vae"]}}
            renames[(node_id, 2)] = [f"{node_id}_vae", 0]
            renames[(node_id, 1)] = None  # the checkpoint's CLIP: no workflow uses it
        elif kind in ("LTXAVTextEncoderLoader", "CLIPLoader"):
            del prompt[node_id]
            renames[(node_id, 0)] = None
        elif kind == "CLIPTextEncode":
            prompt[node_id] = {"class_type": "TDPTestRandomConditioning",
                               "inputs": {"seed": int(node_id), "tokens": 8, "dim": context_dim}}
        elif kind == "LTXVAudioVAELoader":
            inputs["ckpt_name"] = names["audio_vae"]
        elif kind == "LatentUpscaleModelLoader":
            inputs["model_name"] = names["upsampler"]
        elif kind == "LoadLatent":
            inputs["latent"] = names["latent"]
        elif kind == "EmptyLTXVLatentVideo":
            inputs.update(STAGE1_SIZE)
        elif kind == "LTXVEmptyLatentAudio":
            inputs["frames_number"] = STAGE1_SIZE["length"]
        elif kind == "LTXVScheduler":
            inputs["steps"] = 3
        elif kind == "LTXTDPTileConfig":
            for axis in ("frames", "height", "width"):
                inputs[f"{axis}_overlap"] = min(inputs[f"{axis}_overlap"], 2)
        elif kind == "LTXTDPMultiGPULauncher":
            inputs.update(ranks=GROUP_RANKS, devices="", backend="gloo", timeout_s=120)
        elif kind == "LTXTDPTiledVAEDecode":
            inputs.update(DECODE_TILES)
    for node in prompt.values():
        for name, value in list(node["inputs"].items()):
            if isinstance(value, list) and len(value) == 2 and (value[0], value[1]) in renames:
                target = renames[(value[0], value[1])]
                assert target is not None, f"{node['class_type']}.{name} uses an output the tiny mapping removed"
                node["inputs"][name] = target
    return prompt


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
    from support.server import PACK_DIR_NAME

    templates = comfy_server.get("/workflow_templates")
    listed = set(templates.get(PACK_DIR_NAME, []))
    assert listed == {p.stem for p in WORKFLOWS}, f"GET /workflow_templates lists {templates}"
