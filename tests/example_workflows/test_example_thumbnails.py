"""The example workflows' thumbnails, as the template browser shows them: the main job's trained model refining a
video twice its trained size untiled and with TDP, at each workflow's own tile layout.

With LTX_TDP_WRITE_EXAMPLE_ASSETS=1 the test writes the thumbnails (example_workflows/<name>.jpg) instead of checking
them: `LTX_TDP_WRITE_EXAMPLE_ASSETS=1 COMFYUI_SRC=<ComfyUI 0.33.0> bash scripts/test.sh tests/example_workflows`. That
the browser fetches them is checked in test_example_workflows.py.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from ltx_tdp_devkit.workflow_format import load, subgraph_node, subgraphs, thumbnail_path, twin_path, ui_workflows

pytestmark = pytest.mark.server

WRITE_ASSETS = os.environ.get("LTX_TDP_WRITE_EXAMPLE_ASSETS") == "1"
WORKFLOWS = ui_workflows()
OFF_LEVELS = 24
MAX_OFF_FRACTION = 0.002
"""A committed thumbnail matches the card made now when at most this fraction of its pixels differ by more than
OFF_LEVELS (of 255) from the card's JPEG: another ComfyUI's last-bit differences or another JPEG library stay far
below it; an overlap of 4 cells where the card shows 5 changes about 1 % of the pixels."""


def _tile_layout(prompt: dict) -> tuple[tuple[int, int], int] | None:
    """(height tiles, width tiles) and overlap of a prompt's LTX TDP Tile Config, None if it has none."""
    configs = [n["inputs"] for n in prompt.values() if n["class_type"] == "LTXTDPTileConfig"]
    if not configs:
        return None
    c = configs[0]
    return (c["height_tiles"], c["width_tiles"]), max(c["height_overlap"], c["width_overlap"])


@pytest.fixture(scope="module")
def main_job_results(comfy_server):
    """The main job's refine (ltx_tdp_devkit.quality_example) on the test server, once per tile layout."""
    from ltx_tdp_devkit.quality_example import example_case, run_example

    results = {}

    def result(layout: tuple[tuple[int, int], int] | None):
        case = example_case(*layout) if layout else example_case()
        if case not in results:
            results[case] = run_example(comfy_server, case)
        return results[case]

    return result


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.stem for p in WORKFLOWS])
def test_thumbnail_is_the_trained_models_before_and_after_with_the_workflows_tiles(path, main_job_results):
    """The thumbnail is what ltx_tdp_devkit.thumbnails makes now from the main job's model refined with the workflow's
    own tile counts and overlap (its API twin's LTX TDP Tile Config; the main job's 2 x 2 where it has none): untiled
    and TDP side by side, the tiles drawn, under the workflow's name. Written with LTX_TDP_WRITE_EXAMPLE_ASSETS=1."""
    from PIL import Image

    from ltx_tdp_devkit.thumbnails import JPEG_QUALITY, example_thumbnail, write_thumbnail

    workflow = load(path)
    result = main_job_results(_tile_layout(load(twin_path(path))))
    assert result.psnrs["tdp"] > result.psnrs["untiled"], f"{path.stem}: {result.psnrs}"
    card = example_thumbnail(result, subgraphs(workflow)[subgraph_node(workflow)["type"]]["name"])
    if WRITE_ASSETS:
        write_thumbnail(thumbnail_path(path), card)
    committed = np.asarray(Image.open(thumbnail_path(path)).convert("RGB"), dtype=float)
    encoded = io.BytesIO()
    card.save(encoded, "JPEG", quality=JPEG_QUALITY)
    now = np.asarray(Image.open(encoded).convert("RGB"), dtype=float)
    assert committed.shape == now.shape, f"{thumbnail_path(path).name} is {committed.shape}, the card {now.shape}"
    off = (np.abs(committed - now).max(axis=-1) > OFF_LEVELS).mean()
    assert off <= MAX_OFF_FRACTION, (
        f"{thumbnail_path(path).name} is not the card the trained model gives now: {off:.2%} of its pixels differ by "
        f"more than {OFF_LEVELS} levels; regenerate it (docs/development.md, Example workflows)")
