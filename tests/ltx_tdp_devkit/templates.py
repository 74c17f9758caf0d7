"""ComfyUI's own LTX-2 templates, read from the `comfyui-workflow-templates` package the ComfyUI under test
installs (never copied into this repository), and the stage-2 shape the guide's instructions rely on.

An official LTX-2 template is one subgraph node (or a few) on the canvas; inside, stage 1 samples at half
size, `LTXVLatentUpsampler` doubles the video latent, and stage 2 refines it. Stage 2 is the sampler whose
`latent_image` has the upsampler among its ancestors. The guide (docs/official-templates.md) tells users to put
the TDP patcher on the `model` input of stage 2's guider and to swap the `VAEDecode`/`VAEDecodeTiled` that decodes stage 2's
video for the pack's tiled decode; `stage2()` finds exactly those nodes and raises `TemplateShapeError`,
naming what differs, where a template no longer has that shape.

Graphs here are the UI format: the root graph's links are lists `[id, origin, slot, target, slot, type]`,
a subgraph definition's links are dicts with the same fields; mode 4 is bypassed (the frontend routes a
bypassed node's input to its output), mode 2 muted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LTX2_TEMPLATE = re.compile(r"ltx2")
"""Template ids of LTX-2 / LTX-2.3 (not `ltxv_*`, LTX-Video 0.9)."""

SAMPLERS = frozenset({"SamplerCustomAdvanced", "SamplerCustom", "KSampler", "KSamplerAdvanced"})
GUIDERS = frozenset({"CFGGuider", "LTXVDualCFGGuider"})
"""Stage 2's guider: CFGGuider (LTX-2, 2.3) or LTXVDualCFGGuider (LTX-2.5: separate video and audio cfg)."""
DECODES = frozenset({"VAEDecode", "VAEDecodeTiled"})
SAMPLER_OUTPUTS = ("output", "denoised_output")
"""SamplerCustomAdvanced's outputs by slot."""

MODE_MUTED = 2
MODE_BYPASSED = 4


class TemplateShapeError(AssertionError):
    """A template whose stage 2 no longer has the shape the guide's instructions describe."""


def templates_package_version() -> str | None:
    """Version of the installed `comfyui-workflow-templates`, or None where it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("comfyui-workflow-templates")
    except metadata.PackageNotFoundError:
        return None


def ltx2_template_ids() -> list[str]:
    """Ids of every LTX-2 template in the installed templates package (empty where it is not installed)."""
    try:
        import comfyui_workflow_templates as package
    except ImportError:
        return []
    return sorted(t.template_id for t in package.iter_templates() if LTX2_TEMPLATE.search(t.template_id))


def template_path(template_id: str) -> Path:
    import comfyui_workflow_templates as package

    return Path(package.get_asset_path(template_id, f"{template_id}.json"))


def load_template(template_id: str) -> dict[str, Any]:
    """The template's UI workflow as the template browser opens it."""
    return json.loads(template_path(template_id).read_text())


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


@dataclass(frozen=True)
class Stage2:
    """Where the guide's instructions act in one template: all ids are of nodes in `graph`."""

    template_id: str
    path: tuple[int, ...]
    """Subgraph-node ids from the root to `graph` (empty: the root graph)."""
    graph: Graph = field(repr=False)
    sampler: int
    output: str
    """The sampler output stage 2's result is taken from: `output` or `denoised_output`."""
    guider: int
    """Stage 2's guider (CFGGuider or LTXVDualCFGGuider): the TDP patcher goes on its `model` input."""
    model_origin: tuple[int, int]
    """Where that `model` input comes from today (checkpoint loader or LoRA loader output)."""
    stage1_guiders: tuple[int, ...]
    """The other samplers' guiders: they keep the unpatched model."""
    first_sigma: float | None
    audio_in: tuple[int, int]
    """Origin of the audio latent that enters stage 2 (the stage-1 audio)."""
    video_in: tuple[int, int]
    """Origin of the (upscaled) video latent that enters stage 2."""
    separate: int
    """The LTXVSeparateAVLatent that splits stage 2's result."""
    video_decode: int
    """The decode of stage 2's video (VAEDecode or VAEDecodeTiled) to swap for the pack's tiled decode."""
    audio_decode: int
    """The LTXVAudioVAEDecode of stage 2's audio (kept)."""

    @property
    def subgraph_name(self) -> str:
        return self.graph.name

    @property
    def guider_type(self) -> str:
        return self.graph.nodes[self.guider].type

    @property
    def video_decode_type(self) -> str:
        return self.graph.nodes[self.video_decode].type


def has_local_sampler(workflow: Mapping[str, Any]) -> bool:
    """Whether any active graph of the template samples locally (API templates call a hosted model instead)."""
    return any(node.active and node.type in SAMPLERS for _, graph in active_graphs(workflow)
               for node in graph.nodes.values())


def upscale_stages(workflow: Mapping[str, Any]) -> list[tuple[tuple[int, ...], Graph, int]]:
    """(path, graph, sampler id) of every active sampler whose latent comes through LTXVLatentUpsampler."""
    found = []
    for path, graph in active_graphs(workflow):
        for node in graph.nodes.values():
            if node.active and node.type in SAMPLERS:
                latent_input = "latent_image" if "latent_image" in node.inputs else "latent"
                if any(graph.nodes[a].type == "LTXVLatentUpsampler" for a in graph.ancestors(node.id, latent_input)):
                    found.append((path, graph, node.id))
    return found


def _only(nodes: list[Node], what: str, template_id: str) -> Node:
    if len(nodes) != 1:
        raise TemplateShapeError(f"{template_id}: expected one {what}, found {[(n.id, n.type) for n in nodes]}")
    return nodes[0]


def _first_sigma(graph: Graph, sampler: int) -> float | None:
    origin = graph.origin(sampler, "sigmas")
    node = graph.nodes.get(origin[0]) if origin else None
    if node is None or node.type != "ManualSigmas":
        return None
    text = str((node.raw.get("widgets_values") or [""])[0])
    return float(text.split(",")[0])


def stage2(template_id: str, workflow: Mapping[str, Any]) -> Stage2 | None:
    """The template's stage 2 in the shape the guide describes; None for a single-stage template (no
    sampler fed through LTXVLatentUpsampler). Raises TemplateShapeError naming what differs."""
    stages = upscale_stages(workflow)
    if not stages:
        return None
    if len(stages) != 1:
        raise TemplateShapeError(f"{template_id}: {len(stages)} samplers after an LTXVLatentUpsampler, "
                                 f"the instructions describe one: {[(p, s) for p, _, s in stages]}")
    path, graph, sampler_id = stages[0]
    sampler = graph.nodes[sampler_id]
    if sampler.type != "SamplerCustomAdvanced":
        raise TemplateShapeError(f"{template_id}: stage 2 samples with {sampler.type}, not SamplerCustomAdvanced")
    guider_origin = graph.origin(sampler_id, "guider")
    guider = graph.nodes.get(guider_origin[0]) if guider_origin else None
    if guider is None or guider.type not in GUIDERS or not guider.active:
        raise TemplateShapeError(f"{template_id}: stage 2's guider is {guider and guider.type}, not an active "
                                 f"{' or '.join(sorted(GUIDERS))}")
    model_origin = graph.origin(guider.id, "model")
    if model_origin is None:
        raise TemplateShapeError(f"{template_id}: stage 2's {guider.type} has no model link")
    concat_origin = graph.origin(sampler_id, "latent_image")
    concat = graph.nodes.get(concat_origin[0]) if concat_origin else None
    if (concat is None or concat.type != "LTXVConcatAVLatent" or graph.origin(concat.id, "audio_latent") is None
            or graph.origin(concat.id, "video_latent") is None):
        raise TemplateShapeError(f"{template_id}: stage 2's latent_image is not an LTXVConcatAVLatent of video + audio")
    used = [(slot, n) for slot in range(len(SAMPLER_OUTPUTS)) for n in graph.active_consumers(sampler_id, slot)]
    separate_uses = [(slot, n) for slot, n in used if n.type == "LTXVSeparateAVLatent"]
    if len(separate_uses) != 1 or len(used) != 1:
        raise TemplateShapeError(f"{template_id}: stage 2's result goes to {[(SAMPLER_OUTPUTS[s], n.type) for s, n in used]}, "
                                 "the instructions expect one LTXVSeparateAVLatent")
    slot, separate = separate_uses[0]
    decodes = [n for n in graph.active_consumers(separate.id, 0)
               if n.type in DECODES and any(graph.active_consumers(n.id, 0))]
    video_decode = _only(decodes, "VAEDecode/VAEDecodeTiled of stage 2's video whose frames are used", template_id)
    audio_decode = _only([n for n in graph.active_consumers(separate.id, 1) if n.type == "LTXVAudioVAEDecode"],
                         "LTXVAudioVAEDecode of stage 2's audio", template_id)
    others = []
    for node in graph.nodes.values():
        if node.active and node.type in SAMPLERS and node.id != sampler_id:
            g = graph.origin(node.id, "guider")
            if g is not None:
                others.append(g[0])
    if guider.id in others:
        raise TemplateShapeError(f"{template_id}: stage 2's {guider.type} {guider.id} also guides another sampler")
    return Stage2(template_id=template_id, path=path, graph=graph, sampler=sampler_id, output=SAMPLER_OUTPUTS[slot],
                  guider=guider.id, model_origin=model_origin, stage1_guiders=tuple(others),
                  first_sigma=_first_sigma(graph, sampler_id), audio_in=graph.origin(concat.id, "audio_latent"),
                  video_in=graph.origin(concat.id, "video_latent"),
                  separate=separate.id, video_decode=video_decode.id, audio_decode=audio_decode.id)


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


@dataclass(frozen=True)
class TdpEdit:
    """The nodes the guide's instructions add to a template's stage-2 subgraph."""

    tiling: int
    patcher: int
    decode: int | None
    """The tiled decode added in place of the template's (None: the template's own decode was kept)."""


def add_tdp_to_stage2(frontend: Any, stage: Stage2, swap_decode: bool = True) -> TdpEdit:
    """Follow the guide (docs/official-templates.md) in the real frontend (`ltx_tdp_devkit.frontend.Frontend`,
    template loaded): an LTX TDP Model Patcher (with an LTX TDP Tile Config) on the `model` input of stage 2's
    guider, and, with `swap_decode`, LTX TDP Tiled VAE Decode in place of stage 2's video decode. Every other
    node and link stays as the template has it."""
    graph, path = stage.graph, stage.path
    guider = graph.nodes[stage.guider].raw
    x0 = guider["pos"][0]
    y = free_row_below(graph, x0, x0 + 640)
    tiling = frontend.add_node(path, "LTXTDPTileConfig", (x0, y))
    patcher = frontend.add_node(path, "LTXTDPModelPatcher", (x0 + 340, y))
    frontend.connect(path, tiling, 0, patcher, "tiling")
    frontend.connect(path, *stage.model_origin, patcher, "model")
    frontend.connect(path, patcher, 0, stage.guider, "model")
    if not swap_decode:
        return TdpEdit(tiling=tiling, patcher=patcher, decode=None)

    old = graph.nodes[stage.video_decode]
    x = old.raw["pos"][0]
    decode = frontend.add_node(path, "LTXTDPTiledVAEDecode", (x, free_row_below(graph, x, x + old.raw["size"][0])))
    frontend.connect(path, *old.inputs["vae"], decode, "vae")
    frontend.connect(path, *old.inputs["samples"], decode, "samples")
    for target, input_name in graph.consumers.get((old.id, 0), ()):
        frontend.connect(path, decode, 0, target, input_name)
    frontend.remove_node(path, old.id)
    return TdpEdit(tiling=tiling, patcher=patcher, decode=decode)


ICLORA_TEMPLATE = "video_ltx2_3_ic_lora"
"""ComfyUI's LTX-2.3 IC-LoRA template: one KSampler generating from noise at the final size, guided by an IC-LoRA
control video (union control, reference downscale factor 2). The guide (docs/official-templates.md) adds a stage 2."""


@dataclass(frozen=True)
class ICLoRAStage1:
    """The nodes of the IC-LoRA template's only stage that its added stage 2 builds on (ids in `graph`)."""

    template_id: str
    path: tuple[int, ...]
    graph: Graph = field(repr=False)
    sampler: int
    """The KSampler (stage 1)."""
    separate: int
    """The LTXVSeparateAVLatent of its result: video with guide frames, and the audio."""
    crop_guides: int
    """LTXVCropGuides of stage 1's video and conditioning: the guide frames and keyframe_idxs removed."""
    video_decode: int
    audio_decode: int
    video_out: tuple[int, str]
    """(node, input) the decoded frames go to (CreateVideo's images)."""
    checkpoint: int
    """CheckpointLoaderSimple: its VAE (slot 2) encodes guides, upsamples and decodes."""
    iclora_model: int
    """The LoraLoaderModelOnly of the IC-LoRA: the MODEL stage 1 samples with."""
    iclora_parameters: int
    """GetICLoRAParameters of that LoRA (its reference_downscale_factor)."""
    first_frame: tuple[int, int]
    """Origin of the first-frame image (LTXVImgToVideoInplace's image)."""
    control: tuple[int, int]
    """Origin of the control images (the IC-LoRA guide's image)."""


def _one(graph: Graph, node_type: str, template_id: str) -> Node:
    return _only([n for n in graph.nodes.values() if n.active and n.type == node_type], node_type, template_id)


def iclora_stage1(template_id: str, workflow: Mapping[str, Any]) -> ICLoRAStage1:
    """The IC-LoRA template's single stage in the shape the guide's stage-2 steps rely on; raises
    TemplateShapeError naming what differs."""
    found = [(p, g) for p, g in active_graphs(workflow)
             if any(n.active and n.type == "GetICLoRAParameters" for n in g.nodes.values())]
    if len(found) != 1:
        raise TemplateShapeError(f"{template_id}: expected one graph with GetICLoRAParameters, found {len(found)}")
    path, graph = found[0]
    sampler = _one(graph, "KSampler", template_id)
    if any(n.active and n.type in SAMPLERS and n.id != sampler.id for n in graph.nodes.values()):
        raise TemplateShapeError(f"{template_id}: more than one sampler, the steps describe a single-stage template")
    separate = _only(graph.active_consumers(sampler.id, 0), "consumer of the KSampler's LATENT", template_id)
    crop = _only([n for n in graph.active_consumers(separate.id, 0) if n.type == "LTXVCropGuides"],
                 "LTXVCropGuides of stage 1's video", template_id)
    decode = _only([n for n in graph.active_consumers(crop.id, 2) if n.type in DECODES], "decode of stage 1's video",
                   template_id)
    audio = _only([n for n in graph.active_consumers(separate.id, 1) if n.type == "LTXVAudioVAEDecode"],
                  "LTXVAudioVAEDecode of stage 1's audio", template_id)
    outs = graph.consumers.get((decode.id, 0), ())
    video_out = outs[0] if len(outs) == 1 else None
    guide = _one(graph, "LTXVAddGuide", template_id)
    params = _one(graph, "GetICLoRAParameters", template_id)
    lora = graph.nodes[graph.origin(params.id, "iclora_model")[0]]
    if lora.type != "LoraLoaderModelOnly" or graph.origin(sampler.id, "model") != (lora.id, 0):
        raise TemplateShapeError(f"{template_id}: the KSampler's model is not the IC-LoRA's LoraLoaderModelOnly")
    i2v = _one(graph, "LTXVImgToVideoInplace", template_id)
    checkpoint = _one(graph, "CheckpointLoaderSimple", template_id)
    if video_out is None or graph.origin(guide.id, "image") is None or graph.origin(i2v.id, "image") is None:
        raise TemplateShapeError(f"{template_id}: the decoded frames, guide images or first frame are not linked")
    return ICLoRAStage1(template_id=template_id, path=path, graph=graph, sampler=sampler.id, separate=separate.id,
                        crop_guides=crop.id, video_decode=decode.id, audio_decode=audio.id, video_out=video_out,
                        checkpoint=checkpoint.id, iclora_model=lora.id, iclora_parameters=params.id,
                        first_frame=graph.origin(i2v.id, "image"), control=graph.origin(guide.id, "image"))


@dataclass(frozen=True)
class ICLoRAStage2:
    """The nodes the guide's steps add to the IC-LoRA template (ids in the stage-1 graph)."""

    guide: int
    """The IC-LoRA guide re-added at full size (LTXVAddGuide)."""
    concat: int
    guider: int
    sampler: int
    separate: int
    crop_guides: int
    tiling: int
    patcher: int
    decode: int
    noise: int


def add_iclora_stage2(frontend: Any, stage: ICLoRAStage1, sigmas: str = "0.625, 0.4, 0.0") -> ICLoRAStage2:
    """Follow the guide's IC-LoRA steps (docs/official-templates.md) in the real frontend (`ltx_tdp_devkit.frontend
    .Frontend`, template loaded): upsample stage 1's guide-free video latent x2 (LTXVLatentUpsampler), condition
    its first frame again (LTXVImgToVideoInplace), re-add the IC-LoRA guide at full size (LTXVAddGuide with the
    template's control images and IC-LoRA parameters), join stage 1's audio (LTXVConcatAVLatent) and sample from
    `sigmas` with SamplerCustomAdvanced, its CFGGuider (cfg 1) on the IC-LoRA MODEL through LTX TDP Model Patcher
    with LTX TDP Tile Config (tile size); crop the guides off the result and decode its video with LTX TDP Tiled
    VAE Decode into the template's CreateVideo, its audio with the template's audio decode. Stage 1's own video
    decode is removed; every other node and link stays as the template has it."""
    graph, path, f = stage.graph, stage.path, frontend
    x0 = graph.nodes[stage.sampler].raw["pos"][0]
    y = free_row_below(graph, x0, x0 + 2200)
    at = lambda column, row=0: (x0 + 340 * column, y + 260 * row)  # noqa: E731
    vae = (stage.checkpoint, 2)
    loader = f.add_node(path, "LatentUpscaleModelLoader", at(0))
    upsampler = f.add_node(path, "LTXVLatentUpsampler", at(1))
    f.connect(path, stage.crop_guides, 2, upsampler, "samples")
    f.connect(path, loader, 0, upsampler, "upscale_model")
    f.connect(path, *vae, upsampler, "vae")
    i2v = f.add_node(path, "LTXVImgToVideoInplace", at(2))
    f.connect(path, *vae, i2v, "vae")
    f.connect(path, *stage.first_frame, i2v, "image")
    f.connect(path, upsampler, 0, i2v, "latent")
    guide = f.add_node(path, "LTXVAddGuide", at(3))
    for name, slot in (("positive", 0), ("negative", 1)):
        f.connect(path, stage.crop_guides, slot, guide, name)
    f.connect(path, *vae, guide, "vae")
    f.connect(path, i2v, 0, guide, "latent")
    f.connect(path, *stage.control, guide, "image")
    f.connect(path, stage.iclora_parameters, 0, guide, "iclora_parameters")
    concat = f.add_node(path, "LTXVConcatAVLatent", at(4))
    f.connect(path, guide, 2, concat, "video_latent")
    f.connect(path, stage.separate, 1, concat, "audio_latent")
    tiling = f.add_node(path, "LTXTDPTileSizeConfig", at(0, 1))
    patcher = f.add_node(path, "LTXTDPModelPatcher", at(1, 1))
    f.connect(path, stage.iclora_model, 0, patcher, "model")
    f.connect(path, tiling, 0, patcher, "tiling")
    guider = f.add_node(path, "CFGGuider", at(2, 1))
    f.connect(path, patcher, 0, guider, "model")
    for name, slot in (("positive", 0), ("negative", 1)):
        f.connect(path, guide, slot, guider, name)
    f.set_widget(path, guider, "cfg", 1.0)
    noise = f.add_node(path, "RandomNoise", at(3, 1))
    select = f.add_node(path, "KSamplerSelect", at(3, 2))
    f.set_widget(path, select, "sampler_name", "euler")
    manual = f.add_node(path, "ManualSigmas", at(2, 2))
    f.set_widget(path, manual, "sigmas", sigmas)
    sampler = f.add_node(path, "SamplerCustomAdvanced", at(4, 1))
    for node, name in ((noise, "noise"), (guider, "guider"), (select, "sampler"), (manual, "sigmas"),
                       (concat, "latent_image")):
        f.connect(path, node, 0, sampler, name)
    separate = f.add_node(path, "LTXVSeparateAVLatent", at(5, 1))
    f.connect(path, sampler, 0, separate, "av_latent")
    crop = f.add_node(path, "LTXVCropGuides", at(6, 1))
    for name, slot in (("positive", 0), ("negative", 1)):
        f.connect(path, guide, slot, crop, name)
    f.connect(path, separate, 0, crop, "latent")
    decode = f.add_node(path, "LTXTDPTiledVAEDecode", at(7, 1))
    f.connect(path, *vae, decode, "vae")
    f.connect(path, crop, 2, decode, "samples")
    f.connect(path, decode, 0, *stage.video_out)
    f.connect(path, separate, 1, stage.audio_decode, "samples")
    f.remove_node(path, stage.video_decode)
    return ICLoRAStage2(guide=guide, concat=concat, guider=guider, sampler=sampler, separate=separate,
                        crop_guides=crop, tiling=tiling, patcher=patcher, decode=decode, noise=noise)
