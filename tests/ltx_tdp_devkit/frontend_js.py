"""The JavaScript `ltx_tdp_devkit.frontend` runs in the frontend's page (`page.evaluate`): function expressions that
load a workflow, edit the graph as a user does on the canvas, and frame the canvas for a screenshot. They use the
frontend's own objects (`app`, `LiteGraph`) only."""

from __future__ import annotations

INSTALL_HOOKS = """
() => {
  window.__tdp = {missing: []};
  const orig = app.showMissingNodesError ? app.showMissingNodesError.bind(app) : null;
  app.showMissingNodesError = (missing, ...rest) => {
    for (const m of (missing || [])) window.__tdp.missing.push(typeof m === 'string' ? m : (m.type || JSON.stringify(m)));
    if (orig) return orig(missing, ...rest);
  };
}
"""
"""Installed once per page: records the node types the frontend reports through its missing-nodes dialog."""

LOAD = """
async (workflow) => {
  window.__tdp.missing = [];
  let error = null;
  try {
    await app.loadGraphData(workflow, true, true, null);
  } catch (e) {
    error = String(e && e.stack || e);
  }
  const graph = app.rootGraph || app.graph;
  const nodes = graph.nodes || graph._nodes || [];
  const registered = LiteGraph.registered_node_types || {};
  const types = nodes.map(n => n.type);
  const missing = nodes.filter(n => !(n.type in registered)).map(n => n.type);
  if (app.canvas) { app.canvas.ds.scale = 1; }
  return {node_count: nodes.length, node_types: types, missing_types: missing,
          missing_dialog: [...window.__tdp.missing], load_error: error};
}
"""
"""Load a UI workflow as the template browser or a drop does; what the frontend made of it (`LoadReport`'s fields)."""

FIT = """
() => {
  const graph = app.rootGraph || app.graph;
  const nodes = graph.nodes || graph._nodes || [];
  if (!nodes.length || !app.canvas) return;
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const n of nodes) {
    x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - 30);
    x1 = Math.max(x1, n.pos[0] + n.size[0]); y1 = Math.max(y1, n.pos[1] + n.size[1]);
  }
  const c = app.canvas.canvas;
  const scale = Math.min((c.width - 140) / (x1 - x0), (c.height - 100) / (y1 - y0), 1);
  app.canvas.ds.scale = scale;
  app.canvas.ds.offset = [-x0 + 100 / scale, -y0 + 60 / scale];
  app.canvas.setDirty(true, true);
  app.canvas.draw(true, true);
}
"""
"""Zoom and pan the canvas so that every node of the graph shown fits (for a screenshot)."""


GRAPH_AT = """
(path) => {
  let graph = app.rootGraph || app.graph;
  for (const id of path) {
    const node = graph.getNodeById(id);
    if (!node || !node.subgraph) throw new Error(`node ${id} is not a subgraph node`);
    graph = node.subgraph;
  }
  return graph;
}
"""
"""A function expression: the graph at a path of subgraph-node ids from the root (empty: the root)."""

EDIT = """
async ({path, op, args}) => {
  const SUBGRAPH_INPUT = -10;
  const graph = (%s)(path);
  const node = (id) => {
    const n = graph.getNodeById(id);
    if (!n) throw new Error(`no node ${id} in this graph`);
    return n;
  };
  if (op === 'add') {
    const n = LiteGraph.createNode(args.type);
    if (!n) throw new Error(`the frontend has no node type ${args.type}`);
    n.pos = args.pos;
    graph.add(n);
    return n.id;
  }
  if (op === 'connect') {
    const target = node(args.target);
    const slot = target.findInputSlot(args.input);
    if (slot < 0) throw new Error(`${target.type} has no input ${args.input}`);
    const link = args.origin === SUBGRAPH_INPUT
      ? graph.inputs[args.slot].connect(target.inputs[slot], target)  // from the subgraph's input node
      : node(args.origin).connect(args.slot, target, slot);
    if (!link) throw new Error(`could not connect ${args.origin}[${args.slot}] to ${target.type}.${args.input}`);
    return link.id;
  }
  if (op === 'remove') { graph.remove(node(args.id)); return null; }
  if (op === 'mode') { node(args.id).mode = args.value; return null; }
  if (op === 'widget') {
    const n = node(args.id);
    const w = (n.widgets || []).find(w => w.name === args.name);
    if (!w) throw new Error(`${n.type} has no widget ${args.name}`);
    w.value = args.value;
    if (w.callback) w.callback(w.value, app.canvas, n);
    return w.value;
  }
  if (op === 'open') {
    const parent = (%s)(path.slice(0, -1));
    const sg = parent.getNodeById(path[path.length - 1]);
    app.canvas.openSubgraph(sg.subgraph, sg);
    return null;
  }
  if (op === 'bounds') {
    const ns = args.ids.map(node);
    return [Math.min(...ns.map(n => n.pos[0])), Math.min(...ns.map(n => n.pos[1] - LiteGraph.NODE_TITLE_HEIGHT)),
            Math.max(...ns.map(n => n.pos[0] + n.size[0])), Math.max(...ns.map(n => n.pos[1] + n.size[1]))];
  }
  throw new Error(`unknown edit ${op}`);
}
""" % (GRAPH_AT, GRAPH_AT)
"""One edit of the graph at a path, as a user makes it on the canvas: add, connect, remove, mode, widget, open,
bounds (`Frontend`'s methods)."""

FIT_BOUNDS = """
([x0, y0, x1, y1]) => {
  const c = app.canvas.canvas;
  const [left, top, right, bottom] = [80, 110, 40, 40];  // the side bar and the top bar cover the canvas there
  const w = c.width - left - right, h = c.height - top - bottom;
  const scale = Math.min(w / (x1 - x0), h / (y1 - y0), 1.5);
  app.canvas.ds.scale = scale;
  app.canvas.ds.offset = [-x0 + (left + (w - scale * (x1 - x0)) / 2) / scale,
                          -y0 + (top + (h - scale * (y1 - y0)) / 2) / scale];
  app.canvas.setDirty(true, true);
  app.canvas.draw(true, true);
}
"""
"""Zoom and pan the canvas onto [x0, y0, x1, y1] in canvas coordinates (for a screenshot of a region)."""
