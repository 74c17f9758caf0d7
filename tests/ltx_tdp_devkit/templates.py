"""ComfyUI's own LTX-2 templates, read from the `comfyui-workflow-templates` package the ComfyUI under test
installs (never copied into this repository), and the stage-2 shape the guide's instructions rely on.

An official LTX-2 template is one subgraph node (or a few) on the canvas; inside, stage 1 samples at half
size, `LTXVLatentUpsampler` doubles the video latent, and stage 2 refines it. Stage 2 is the sampler whose
`latent_image` has the upsampler among its ancestors. The guide (docs/official-templates.md) tells users to put
the TDP patcher on the `model` input of stage 2's guider and to swap the `VAEDecode`/`VAEDecodeTiled` that decodes stage 2's
video for the pack's tiled decode; `stage2()` finds exactly those nodes and raises `TemplateShapeError`,
naming what differs, where a template no longer has that shape.

Graphs are read by `template_graphs` (UI format); the IC-LoRA template's own shape is `iclora_template`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .template_graphs import Graph, Node, active_graphs, free_row_below
from .template_graphs import MODE_BYPASSED, api_id  # noqa: F401 - re-exported: the template tests import them here

LTX2_TEMPLATE = re.compile(r"ltx2")
"""Template ids of LTX-2 / LTX-2.3 (not `ltxv_*`, LTX-Video 0.9)."""

SAMPLERS = frozenset({"SamplerCustomAdvanced", "SamplerCustom", "KSampler", "KSamplerAdvanced"})
GUIDERS = frozenset({"CFGGuider", "LTXVDualCFGGuider"})
"""Stage 2's guider: CFGGuider (LTX-2, 2.3) or LTXVDualCFGGuider (LTX-2.5: separate video and audio cfg)."""
DECODES = frozenset({"VAEDecode", "VAEDecodeTiled"})
SAMPLER_OUTPUTS = ("output", "denoised_output")
"""SamplerCustomAdvanced's outputs by slot."""


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


def only_node(nodes: list[Node], what: str, template_id: str) -> Node:
    """The one node of `nodes`; raises TemplateShapeError naming `what` where there are none or several."""
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
    video_decode = only_node(decodes, "VAEDecode/VAEDecodeTiled of stage 2's video whose frames are used",
                             template_id)
    audio_decode = only_node([n for n in graph.active_consumers(separate.id, 1) if n.type == "LTXVAudioVAEDecode"],
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
