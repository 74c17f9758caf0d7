"""The example workflows in ComfyUI's real frontend: headless Chromium (Debian's `chromium`, installed by
the test setup when missing) opens the frontend the server under test ships, loads each UI workflow the
way a drag-and-drop does, and must report no missing node type, no load error and no console error. The
prompt the frontend itself builds from the loaded graph must equal the API twin. A screenshot per
workflow and ComfyUI version goes to artifacts/screenshots/.

Workflows that need LTX-2 nodes are checked where the runtime has them and skipped, with the missing nodes
named, where it does not (ComfyUI 0.3.75).
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.workflow_format import load, missing_node_types, twin_path, ui_workflows

pytestmark = pytest.mark.server

SCREENSHOTS = PACK_ROOT / "artifacts" / "screenshots"
PACK_PREFIX = "LTXTDP"
WORKFLOWS = ui_workflows()


@pytest.fixture(scope="module")
def server_facts(comfy_server) -> dict:
    return {"object_info": comfy_server.get("/object_info"),
            "version": comfy_server.get("/system_stats")["system"].get("comfyui_version", "unknown")}


@pytest.fixture(scope="module")
def frontend(comfy_server):
    pytest.importorskip("playwright", reason="Playwright (pip `playwright`) is not installed; scripts/env.sh installs it")
    from ltx_tdp_devkit.frontend import chromium_path, open_frontend

    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no Chromium: /usr/bin/chromium is missing and apt-get is not available to install it")
    with open_frontend(comfy_server.url, chromium) as page:
        yield page


def _prompt_core(prompt: dict) -> dict:
    return {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in prompt.items()}


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.stem for p in WORKFLOWS])
def test_example_loads_in_the_real_frontend_with_no_missing_node(path, frontend, server_facts):
    workflow = load(path)
    missing = missing_node_types(workflow, server_facts["object_info"])
    assert not [t for t in missing if t.startswith(PACK_PREFIX)], f"the pack's own nodes are missing: {missing}"
    if missing:
        pytest.skip(f"ComfyUI {server_facts['version']} lacks {', '.join(missing)} (LTX-2 nodes); "
                    "run with a current ComfyUI")

    report = frontend.load(workflow)
    shot = frontend.screenshot(SCREENSHOTS / f"comfyui-{server_facts['version']}" / f"{path.stem}.png")

    assert report.load_error is None, f"{path.name}: loadGraphData failed: {report.load_error}"
    assert not report.missing_types, f"{path.name}: node types the frontend does not know: {report.missing_types}"
    assert not report.missing_dialog, f"{path.name}: the frontend reported missing nodes: {report.missing_dialog}"
    assert not report.console_errors, f"{path.name}: console errors while loading: {report.console_errors}"
    assert report.node_count == len(workflow["nodes"]), (
        f"{path.name}: {report.node_count} nodes on the canvas, {len(workflow['nodes'])} in the file")
    assert sorted(report.node_types) == sorted(n["type"] for n in workflow["nodes"])
    assert shot.stat().st_size > 10_000, f"screenshot {shot} looks empty"

    built = _prompt_core(frontend.graph_to_prompt())
    twin = _prompt_core(load(twin_path(path)))
    assert built == twin, (f"{path.name}: the frontend's own prompt differs from the twin in nodes "
                           f"{sorted(k for k in set(built) | set(twin) if built.get(k) != twin.get(k))}")
