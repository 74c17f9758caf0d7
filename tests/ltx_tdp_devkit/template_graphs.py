"""A workflow's graphs as the frontend saves them (UI format), read for the template tests: nodes, links, the
subgraphs active nodes instantiate, and room on the canvas for new nodes.

The root graph's links are lists `[id, origin, slot, target, slot, type]`, a subgraph definition's links are
dicts with the same fields; mode 4 is bypassed (the frontend routes a bypassed node's input to its output),
mode 2 muted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

MODE_MUTED = 2
MODE_BYPASSED = 4


@dataclass(frozen=True)
class Node:
    id: int
    type: str
    mode: int
    inputs: Mapping[str, tuple[int, int] | None]
    """Input name -> (origin node id, origin slot) of its link, None when unlinked."""
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def active(self) -> bool:
        return self.mode not in (MODE_MUTED, MODE_BYPASSED)


@dataclass(frozen=True)
class Graph:
    """The root graph or one subgraph definition."""

    id: str | None
    """The subgraph definition's id (the type of the nodes that instantiate it); None for the root."""
    name: str
    nodes: Mapping[int, Node]
    consumers: Mapping[tuple[int, int], tuple[tuple[int, str], ...]]
    """(origin id, slot) -> ((target id, input name), ...)"""
    raw: Mapping[str, Any] = field(repr=False)

    def origin(self, node_id: int, input_name: str) -> tuple[int, int] | None:
        return self.nodes[node_id].inputs.get(input_name)

    def active_consumers(self, node_id: int, slot: int) -> list[Node]:
        return [self.nodes[t] for t, _ in self.consumers.get((node_id, slot), ()) if t in self.nodes
                and self.nodes[t].active]

    def ancestors(self, node_id: int, input_name: str) -> set[int]:
        """Every node upstream of one input (links through bypassed nodes included)."""
        seen: set[int] = set()
        start = self.origin(node_id, input_name)
        todo = [start[0]] if start else []
        while todo:
            nid = todo.pop()
            if nid in seen or nid not in self.nodes:
                continue
            seen.add(nid)
            todo.extend(o[0] for o in self.nodes[nid].inputs.values() if o is not None)
        return seen


def _links(raw_links: list) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for link in raw_links:
        if isinstance(link, dict):
            out[link["id"]] = (link["origin_id"], link["origin_slot"], link["target_id"], link["target_slot"])
        else:
            out[link[0]] = (link[1], link[2], link[3], link[4])
    return out


def _graph(raw: Mapping[str, Any], graph_id: str | None, name: str) -> Graph:
    links = _links(raw.get("links", []))
    nodes: dict[int, Node] = {}
    consumers: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for n in raw.get("nodes", []):
        inputs: dict[str, tuple[int, int] | None] = {}
        for socket in n.get("inputs", []):
            link = links.get(socket.get("link")) if socket.get("link") is not None else None
            inputs[socket["name"]] = (link[0], link[1]) if link else None
            if link:
                consumers.setdefault((link[0], link[1]), []).append((n["id"], socket["name"]))
        nodes[n["id"]] = Node(n["id"], n["type"], n.get("mode", 0), inputs, n)
    return Graph(graph_id, name, nodes, {k: tuple(v) for k, v in consumers.items()}, raw)


def active_graphs(workflow: Mapping[str, Any]) -> Iterator[tuple[tuple[int, ...], Graph]]:
    """(path of subgraph-node ids from the root, graph) for the root and every subgraph an active node
    instantiates, depth first. The API prompt names a node inside as `"<path>:<node id>"` joined by `:`."""
    definitions = {d["id"]: d for d in workflow.get("definitions", {}).get("subgraphs", [])}

    def walk(graph: Graph, path: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], Graph]]:
        yield path, graph
        for node in graph.nodes.values():
            if node.active and node.type in definitions:
                d = definitions[node.type]
                yield from walk(_graph(d, d["id"], d.get("name", d["id"])), (*path, node.id))

    yield from walk(_graph(workflow, None, "root"), ())


def api_id(path: tuple[int, ...], node_id: int | str) -> str:
    """The id the frontend gives a node of a (nested) subgraph in the API prompt."""
    return ":".join(str(p) for p in (*path, node_id))


def node_bounds(graph: Graph, node_ids: list[int]) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) around the nodes on the canvas (title bar included)."""
    boxes = [(graph.nodes[i].raw["pos"], graph.nodes[i].raw["size"]) for i in node_ids]
    return (min(p[0] for p, _ in boxes), min(p[1] - 30 for p, _ in boxes),
            max(p[0] + s[0] for p, s in boxes), max(p[1] + s[1] for p, s in boxes))


def free_row_below(graph: Graph, x0: float, x1: float, gap: float = 60) -> float:
    """A canvas y below every node and group that overlaps the columns [x0, x1]: room for new nodes."""
    bottoms = [n.raw["pos"][1] + n.raw["size"][1] for n in graph.nodes.values()
               if n.raw["pos"][0] < x1 and n.raw["pos"][0] + n.raw["size"][0] > x0]
    for group in graph.raw.get("groups", []):
        gx, gy, gw, gh = group["bounding"]
        if gx < x1 and gx + gw > x0:
            bottoms.append(gy + gh)
    return max(bottoms) + gap
