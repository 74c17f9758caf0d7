"""The example workflows in the UI format (what people drag onto the canvas) and their API twins (what POST /prompt
takes), read as ComfyUI's frontend reads them.

Each example workflow is shaped like ComfyUI's own templates: on the root canvas one subgraph node (its type is the id
of a subgraph definition in `definitions.subgraphs`), the loaders of user files (Load Video, Load Latent) that feed it,
the output nodes it feeds, and markdown notes. The subgraph node's face carries the parameters a user changes: each
subgraph input is linked to one or more widget inputs of nodes inside; its value is the face widget's value. The
frontend's `graphToPrompt` gives a node inside the id `"<subgraph node id>:<inner node id>"`.

The API twin of a workflow (`tests/example_workflows/api/<name>.json`) is exactly what the frontend's `graphToPrompt`
makes of it on ComfyUI 0.33.0; the frontend, not this module, converts (ltx_tdp_devkit.frontend). To rewrite the
twins and the thumbnails: `LTX_TDP_WRITE_EXAMPLE_ASSETS=1 COMFYUI_SRC=<ComfyUI 0.33.0> bash scripts/test.sh
tests/example_workflows` (docs/development.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import API_WORKFLOWS, PACK_ROOT

UI_WORKFLOWS = PACK_ROOT / "example_workflows"

FRONTEND_ONLY = frozenset({"Note", "MarkdownNote", "Reroute", "PrimitiveNode"})
"""Node types that live in the frontend only and never reach the server."""

SUBGRAPH_INPUT = -10
"""The origin id of a link from a subgraph's input node (a face parameter) to a node inside."""


def load(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def ui_workflows() -> list[Path]:
    return sorted(UI_WORKFLOWS.glob("*.json"))


def twin_path(ui_path: Path | str) -> Path:
    """The API-format twin of an example workflow: tests/example_workflows/api/<same name>."""
    return API_WORKFLOWS / Path(ui_path).name


def thumbnail_path(ui_path: Path | str) -> Path:
    """The template browser's picture of an example workflow: example_workflows/<same name>.jpg (the frontend asks
    for `/api/workflow_templates/<pack folder>/<name>.jpg`)."""
    return UI_WORKFLOWS / f"{Path(ui_path).stem}.jpg"


def subgraphs(workflow: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The workflow's subgraph definitions by id (the type of the nodes that instantiate them)."""
    return {d["id"]: d for d in workflow.get("definitions", {}).get("subgraphs", [])}


def all_nodes(workflow: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of the root graph and of every subgraph definition."""
    yield from workflow["nodes"]
    for definition in subgraphs(workflow).values():
        yield from definition["nodes"]


def node_types(workflow: Mapping[str, Any]) -> set[str]:
    """Node types the server must have for this UI workflow (frontend-only types and subgraph nodes left out)."""
    defined = set(subgraphs(workflow))
    return {n["type"] for n in all_nodes(workflow) if n["type"] not in FRONTEND_ONLY and n["type"] not in defined}


def missing_node_types(workflow: Mapping[str, Any], object_info: Mapping[str, Any]) -> list[str]:
    return sorted(t for t in node_types(workflow) if t not in object_info)


@dataclass(frozen=True)
class FaceParameter:
    """One parameter on a subgraph node's face: a subgraph input and the inner inputs it is linked to."""

    name: str
    label: str
    type: str
    value: Any
    """The face widget's value; None for a socket fed on the root canvas (e.g. the clip from Load Video)."""
    targets: tuple[tuple[int, str], ...]
    """(inner node id, input name) of every inner input this parameter sets."""

    @property
    def is_widget(self) -> bool:
        return self.value is not None


def subgraph_node(workflow: Mapping[str, Any]) -> dict[str, Any]:
    """The one subgraph node on the root canvas; raises ValueError when there is not exactly one."""
    defined = subgraphs(workflow)
    found = [n for n in workflow["nodes"] if n["type"] in defined]
    if len(found) != 1:
        raise ValueError(f"expected one subgraph node on the root canvas, found {[n['id'] for n in found]}")
    return found[0]


def face(workflow: Mapping[str, Any]) -> list[FaceParameter]:
    """The parameters on the face of the workflow's subgraph node, in face order.

    The node's `widgets_values` hold one value per input that shows a widget (inputs with a `widget` entry), in
    input order; its other inputs are sockets linked on the root canvas."""
    node = subgraph_node(workflow)
    definition = subgraphs(workflow)[node["type"]]
    inner = {n["id"]: n for n in definition["nodes"]}
    targets: dict[int, list[tuple[int, str]]] = {}
    for link in definition["links"]:
        if link["origin_id"] == SUBGRAPH_INPUT:
            target = inner[link["target_id"]]
            targets.setdefault(link["origin_slot"], []).append(
                (target["id"], target["inputs"][link["target_slot"]]["name"]))
    values = iter(node.get("widgets_values") or [])
    by_name = {i["name"]: i for i in node.get("inputs", [])}
    out = []
    for slot, spec in enumerate(definition["inputs"]):
        socket = by_name.get(spec["name"], {})
        value = next(values) if "widget" in socket else None
        out.append(FaceParameter(name=spec["name"], label=spec.get("label") or spec["name"], type=spec["type"],
                                 value=value, targets=tuple(targets.get(slot, ()))))
    return out


def notes(workflow: Mapping[str, Any]) -> list[str]:
    """The text of every note on the root canvas."""
    return [n["widgets_values"][0] for n in workflow["nodes"] if n["type"] in FRONTEND_ONLY and n.get("widgets_values")]


def prompt_core(prompt: Mapping[str, Any], object_info: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """An API prompt without what the server ignores: `_meta` (display names differ between versions) and, given the
    server's `object_info`, inputs its node types do not declare (ComfyUI 0.3.75's frontend sends PreviewAny's
    `preview` widget). A dynamic input `values.a` belongs to the declared `values`."""
    core = {}
    for node_id, node in prompt.items():
        inputs = dict(node["inputs"])
        if object_info is not None and node["class_type"] in object_info:
            groups = object_info[node["class_type"]].get("input", {})
            declared = {name for group in groups.values() for name in group}
            inputs = {k: v for k, v in inputs.items() if k in declared or k.split(".")[0] in declared}
        core[node_id] = {"class_type": node["class_type"], "inputs": inputs}
    return core


def write_twin(ui_path: Path | str, prompt: Mapping[str, Any]) -> Path:
    """Write `prompt` (the frontend's conversion of the workflow at `ui_path`) as its API twin."""
    out = twin_path(ui_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(prompt, indent=2, ensure_ascii=False) + "\n")
    return out
