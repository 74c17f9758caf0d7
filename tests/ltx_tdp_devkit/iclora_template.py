"""ComfyUI's LTX-2.3 IC-LoRA template and the stage 2 the guide adds to it (docs/official-templates.md, "The
IC-LoRA template: adding a TDP stage 2"): the template's single stage in the shape the guide's steps rely on, and
those steps followed in the real frontend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .template_graphs import Graph, Node, active_graphs, free_row_below
from .templates import DECODES, SAMPLERS, TemplateShapeError, only_node


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
    return only_node([n for n in graph.nodes.values() if n.active and n.type == node_type], node_type, template_id)


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
    separate = only_node(graph.active_consumers(sampler.id, 0), "consumer of the KSampler's LATENT", template_id)
    crop = only_node([n for n in graph.active_consumers(separate.id, 0) if n.type == "LTXVCropGuides"],
                     "LTXVCropGuides of stage 1's video", template_id)
    decode = only_node([n for n in graph.active_consumers(crop.id, 2) if n.type in DECODES],
                       "decode of stage 1's video", template_id)
    audio = only_node([n for n in graph.active_consumers(separate.id, 1) if n.type == "LTXVAudioVAEDecode"],
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
