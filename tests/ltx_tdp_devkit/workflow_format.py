"""UI-format workflows (what people drag onto the canvas) and their API-format twins (what POST /prompt takes).

ComfyUI's frontend turns a UI workflow into an API prompt; the server never does. This module does the
same for the node types the example workflows use, from the server's `/object_info`:

- a node's `widgets_values` follow the order of its widget inputs (required, then optional, in the
  `input_order` the server reports); an input that accepts several types shows the widget its
  `widgetType` names; a dynamic combo is one widget (its chosen option must bring no inputs of its own); an INT input flagged `control_after_generate` (seeds) carries one
  extra value after its own ("fixed", "randomize", ...), which is not an input;
- an input socket with a link becomes `[source node id, output slot]` (a link on a widget input wins over
  the widget's value); links through Reroute nodes are followed to their source;
- frontend-only nodes (notes, reroutes) and muted nodes (mode 2) are not part of the prompt;
- a title set in the workflow goes to `_meta.title` (the frontend also sends display names there; they
  differ between ComfyUI versions and the server ignores them).

To (re)write the twins from a running server (ComfyUI with this pack; LTX-2 workflows need one that has
LTX-2): `cd tests && python -m ltx_tdp_devkit.workflow_format http://127.0.0.1:8188`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import API_WORKFLOWS, PACK_ROOT

UI_WORKFLOWS = PACK_ROOT / "example_workflows"

FRONTEND_ONLY = frozenset({"Note", "MarkdownNote", "Reroute", "PrimitiveNode"})
"""Node types that live in the frontend only and never reach the server."""

WIDGET_TYPES = frozenset({"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"})
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
"""A V3 combo whose chosen option brings inputs of its own (ComfyUI 0.32+: SaveVideo's codec)."""

MODE_MUTED = 2
MODE_BYPASSED = 4


class WorkflowFormatError(ValueError):
    """A UI workflow this converter cannot turn into an API prompt."""


class MissingNodeTypes(WorkflowFormatError):
    """The workflow uses node types that this ComfyUI does not have."""

    def __init__(self, missing: Iterable[str]):
        self.missing = sorted(set(missing))
        super().__init__(f"node types not in this ComfyUI: {', '.join(self.missing)}")


@dataclass(frozen=True)
class WidgetSlot:
    """One widget input of a node type and how many entries of `widgets_values` it takes."""

    name: str
    values: int = 1


def load(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def ui_workflows() -> list[Path]:
    return sorted(UI_WORKFLOWS.glob("*.json"))


def twin_path(ui_path: Path | str) -> Path:
    """The API-format twin of an example workflow: tests/example_workflows/api/<same name>."""
    return API_WORKFLOWS / Path(ui_path).name


def node_types(workflow: Mapping[str, Any]) -> set[str]:
    """Node types the server must have for this UI workflow (frontend-only types left out)."""
    return {n["type"] for n in workflow["nodes"] if n["type"] not in FRONTEND_ONLY}


def missing_node_types(workflow: Mapping[str, Any], object_info: Mapping[str, Any]) -> list[str]:
    return sorted(t for t in node_types(workflow) if t not in object_info)


def ordered_inputs(info: Mapping[str, Any]) -> Iterator[tuple[str, list]]:
    """(name, spec) of a node type's inputs in the order the frontend lays out its widgets."""
    groups = info.get("input", {})
    order = info.get("input_order") or {k: list(v) for k, v in groups.items()}
    for group in ("required", "optional"):
        for name in order.get(group, []):
            spec = groups.get(group, {}).get(name)
            if spec is not None:
                yield name, spec


def is_widget(spec: list) -> bool:
    """Whether an input spec gets a widget in the frontend (a value in widgets_values)."""
    kind = spec[0]
    options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if options.get("forceInput") or options.get("rawLink"):
        return False
    # A V3 MultiType input ("FLOAT,INT") names the widget it shows in `widgetType` (ComfyUI 0.32+:
    # LTXVEmptyLatentAudio's frame_rate).
    return (isinstance(kind, list) or kind in WIDGET_TYPES or kind == DYNAMIC_COMBO
            or options.get("widgetType") in WIDGET_TYPES)


def widget_slots(info: Mapping[str, Any]) -> list[WidgetSlot]:
    """The widget inputs of a node type, in `widgets_values` order."""
    slots = []
    for name, spec in ordered_inputs(info):
        if not is_widget(spec):
            continue
        options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
        extra = 1 if options.get("control_after_generate") else 0
        if options.get("image_upload") or options.get("video_upload") or options.get("audio_upload"):
            extra += 1  # the upload button's own value
        slots.append(WidgetSlot(name, 1 + extra))
    return slots


def ui_to_api(workflow: Mapping[str, Any], object_info: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The API prompt the frontend makes of `workflow` on a server with this `object_info`.

    Raises MissingNodeTypes when the server lacks a node type, WorkflowFormatError for what the frontend
    would do but this converter does not (bypassed nodes, dict-valued widgets).
    """
    missing = missing_node_types(workflow, object_info)
    if missing:
        raise MissingNodeTypes(missing)
    nodes = {n["id"]: n for n in workflow["nodes"]}
    links = {link[0]: link for link in workflow.get("links", [])}
    prompt: dict[str, dict[str, Any]] = {}
    for node in sorted(workflow["nodes"], key=lambda n: n["id"]):
        kind = node["type"]
        mode = node.get("mode", 0)
        if kind in FRONTEND_ONLY or mode == MODE_MUTED:
            continue
        if mode == MODE_BYPASSED:
            raise WorkflowFormatError(f"node {node['id']} ({kind}) is bypassed; the examples keep every node active")
        values = node.get("widgets_values") or []
        if isinstance(values, dict):
            raise WorkflowFormatError(f"node {node['id']} ({kind}) keeps its widgets as a dict")
        inputs: dict[str, Any] = {}
        at = 0
        specs = dict(ordered_inputs(object_info[kind]))
        for slot in widget_slots(object_info[kind]):
            if at < len(values):
                inputs[slot.name] = values[at]
                _check_dynamic_combo(node, slot.name, specs[slot.name], values[at])
            at += slot.values
        for socket in node.get("inputs", []):
            link_id = socket.get("link")
            if link_id is None:
                continue
            source, out_slot = _source(link_id, links, nodes)
            if source is not None:
                inputs[socket["name"]] = [str(source), out_slot]
        entry: dict[str, Any] = {"class_type": kind, "inputs": inputs}
        if node.get("title"):
            entry["_meta"] = {"title": node["title"]}  # only a title set in the workflow: display names vary by version
        prompt[str(node["id"])] = entry
    return prompt


def _check_dynamic_combo(node: Mapping[str, Any], name: str, spec: list, value: Any) -> None:
    """A dynamic combo's chosen option must bring no inputs: their widgets are not converted here."""
    if spec[0] != DYNAMIC_COMBO:
        return
    options = {o.get("key"): o for o in (spec[1] if len(spec) > 1 else {}).get("options", [])}
    chosen = options.get(value, {}).get("inputs") or {}
    if any(chosen.get(group) for group in ("required", "optional")):
        raise WorkflowFormatError(f"node {node['id']} ({node['type']}): {name} = {value!r} brings inputs of its "
                                  "own, which this converter does not lay out")


def _source(link_id: int, links: Mapping[int, list], nodes: Mapping[int, dict]) -> tuple[int | None, int]:
    """The real (non-reroute) node and output slot at the far end of a link."""
    seen = set()
    while link_id is not None and link_id not in seen:
        seen.add(link_id)
        link = links.get(link_id)
        if link is None:
            raise WorkflowFormatError(f"link {link_id} is not in the workflow's links")
        _, origin, origin_slot = link[0], link[1], link[2]
        node = nodes.get(origin)
        if node is None:
            raise WorkflowFormatError(f"link {link_id} comes from node {origin}, which is not in the workflow")
        if node["type"] != "Reroute":
            return origin, origin_slot
        upstream = node.get("inputs") or [{}]
        link_id = upstream[0].get("link")
    return None, 0


def write_twins(object_info: Mapping[str, Any], paths: Iterable[Path] | None = None) -> list[Path]:
    """Write the API twin of every example workflow (those whose node types this server has)."""
    written = []
    for path in paths or ui_workflows():
        workflow = load(path)
        if missing_node_types(workflow, object_info):
            continue
        out = twin_path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(ui_to_api(workflow, object_info), indent=2) + "\n")
        written.append(out)
    return written


if __name__ == "__main__":
    import sys

    import requests

    if len(sys.argv) != 2:
        raise SystemExit("usage: cd tests && python -m ltx_tdp_devkit.workflow_format SERVER_URL")
    info = requests.get(sys.argv[1].rstrip("/") + "/object_info", timeout=60).json()
    for p in write_twins(info):
        sys.stdout.write(f"{p}\n")
