"""The pack as a headless ComfyUI loads it: no import error, its nodes listed with inputs and tooltips."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.server

PACK_NODES = {
    "LTXTDPTileConfig": {"frames_tiles", "frames_overlap", "height_tiles", "height_overlap", "width_tiles",
                         "width_overlap"},
    "LTXTDPBalancedTileConfig": {"gpus", "overlap", "latent", "model"},
    "LTXTDPTileSizeConfig": {"tile_width", "tile_height", "min_overlap", "tile_frames", "min_frames_overlap"},
    "LTXTDPModelPatcher": {"model", "tiling", "normalize_positions", "audio_mode", "tdp_group"},
    "LTXTDPSequenceParallel": {"model"},
}


def _startup_log(server) -> str:
    """The server log up to the first prompt (later prompts may log tracebacks on purpose)."""
    return server.log_text().split("got prompt", 1)[0]


def test_pack_loads_without_import_errors(comfy_server):
    log = _startup_log(comfy_server)
    assert re.search(r"seconds: \S*custom_nodes/ltx_tdp\s*$", log, re.M), (
        f"ltx_tdp is not among the imported custom nodes:\n{log[-3000:]}")
    problems = [line for line in log.splitlines()
                if "Traceback" in line or (("IMPORT FAILED" in line or "Cannot import" in line) and "ltx_tdp" in line)]
    assert not problems, "import problems in the server log:\n" + "\n".join(problems) + "\n\n" + log[-3000:]


@pytest.mark.parametrize("node", sorted(PACK_NODES))
def test_object_info_lists_the_node_with_its_inputs_and_a_tooltip_on_each(comfy_server, node):
    info = comfy_server.get(f"/object_info/{node}")
    assert node in info, f"/object_info has no {node}"
    spec = info[node]
    inputs = {**spec["input"].get("required", {}), **spec["input"].get("optional", {})}
    assert set(inputs) == PACK_NODES[node], f"{node} inputs: {sorted(inputs)}"
    missing = [name for name, (_type, *opts) in inputs.items() if not (opts and opts[0].get("tooltip"))]
    assert not missing, f"{node} inputs without a tooltip: {missing}"
    assert spec.get("category", "").startswith("LTX/TDP"), spec.get("category")
    assert spec.get("description"), f"{node} has no description"


def test_object_info_lists_every_pack_node(comfy_server):
    info = comfy_server.get("/object_info")
    missing = sorted(set(PACK_NODES) - set(info))
    assert not missing, f"/object_info lacks {missing}"
