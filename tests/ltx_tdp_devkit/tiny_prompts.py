"""API prompts of the example workflows and of ComfyUI's own LTX templates, on the tiny models: which files stand in
for the real ones, and how a prompt is changed to run on them in seconds. `tiny_prompt` changes a prompt, and only so:

- model files are mapped to the tiny ones: a checkpoint loader becomes UNETLoader (tiny LTX-Video or LTX-2
  transformer) plus TDPTestVAELoader (tiny video VAE, the checkpoint's VAE output); the LTX-2.5 split files
  (UNETLoader, the video and audio VAELoaders) become the tiny files of ltx_tdp_devkit.ltx25_files; the LTX-2 audio VAE,
  the latent upscaler, the saved latent, the input picture, the input clip and the IC-LoRA are tiny files of the same
  format (the IC-LoRA template's: `build_iclora_files`);
- the text encoder is replaced by TDPTestRandomConditioning (real LTX text encoders are many GB): the loader goes
  away and every CLIPTextEncode becomes a seeded random conditioning; the LTX-2.5 prompt enhancer (an LLM) passes its
  prompt on, and its Gemma LoRA (`LoraLoader` on the text encoder) is dropped, its model passed on;
- the MoGe depth estimator of the IC-LoRA template is mocked: each `MoGeRender` hands on the frames `MoGeInference`
  would look at (the control images are the loaded video's frames instead of their depth);
- sizes shrink (video 192 x 128 x 9 frames at stage 1, an input clip scaled to 192 x 128, decode tiles of 128 px or
  256 px for LTX-2.5's diffusion VAE, 3 stage-1 scheduler steps, tile overlaps of 2 latent cells, a 2-rank CPU group)
  so that a prompt takes seconds on a CPU.

Everything else (nodes, links, samplers, sigmas, TDP settings) runs as the user gets it.
"""

from __future__ import annotations

import copy
import zlib
from pathlib import Path
from typing import Any

import torch

TINY_FILES = {
    "audio_vae": "checkpoints/tdp_tiny_ltx2_audio_vae.safetensors",
    "upsampler": "latent_upscale_models/tdp_tiny_latent_upsampler.safetensors",
}
TINY_LATENT = "tdp_tiny_video.latent"
TINY_ICLORA = "loras/tdp_tiny_ltx2_iclora_ref0.5.safetensors"
TINY_VIDEO = "tdp_tiny_control.mp4"
TINY_IMAGE = "tdp_tiny_first_frame.png"

STAGE1_SIZE = {"width": 192, "height": 128, "length": 9}
DECODE_TILES = {"spatial_tile": 128, "spatial_overlap": 32}
DIFFUSION_DECODE_TILES = {"spatial_tile": 256, "spatial_overlap": 0}
"""LTX-2.5's diffusion video VAE (the tiny one reaches 9 latent cells): each tile decodes nearly the whole tiny frame
as its context, so two tiles of 256 px (of 384 x 256) test the tiling where 128 px tiles would decode twelve."""
GROUP_RANKS = 2


def build_tiny_files(comfy_base: Path, model_names: dict[str, str]) -> dict[str, str]:
    """File names of every tiny model the example workflows need, by role (built into the base directory)."""
    from ltx_tdp_devkit import tiny_workflow_models as tiny

    models = comfy_base / "models"
    names = dict(model_names)
    if tiny.has_ltx2_audio():
        names["audio_vae"] = tiny.build_ltx2_audio_vae(models / TINY_FILES["audio_vae"]).name
    if tiny.has_ltx_latent_upsampler():
        names["upsampler"] = tiny.build_latent_upsampler(models / TINY_FILES["upsampler"]).name
    latent = torch.randn(1, 128, 2, 8, 12, generator=torch.Generator().manual_seed(5))
    names["latent"] = tiny.write_latent(comfy_base / "input" / TINY_LATENT, latent).name
    return names


def build_iclora_files(comfy_base: Path) -> dict[str, str]:
    """The IC-LoRA template's tiny files by role: a factor-2 IC-LoRA for the tiny LTX-2 transformer (what the
    union-control ref0.5 LoRA is for LTX-2.3), a control video of 9 frames and a first-frame picture at the tiny
    stage-1 size."""
    from ltx_tdp_devkit import tiny_workflow_models as tiny
    from ltx_tdp_devkit.ltx25_files import write_image
    from ltx_tdp_devkit.tiny_models import LTXAV_CONFIG

    width, height, length = STAGE1_SIZE["width"], STAGE1_SIZE["height"], STAGE1_SIZE["length"]
    return {"iclora": tiny.build_iclora(comfy_base / "models" / TINY_ICLORA, LTXAV_CONFIG).name,
            "video": tiny.write_video(comfy_base / "input" / TINY_VIDEO, length, width, height).name,
            "image": write_image(comfy_base / "input" / TINY_IMAGE, width, height).name}


def _mock_depth(prompt: dict[str, Any], renames: dict[tuple[str, int], list | None]) -> None:
    """Drop the MoGe depth estimator: every MoGeRender's output becomes the image its MoGeInference was given."""
    for node_id, node in list(prompt.items()):
        if node["class_type"] == "MoGeRender":
            inference = node["inputs"]["moge_geometry"][0]
            renames[(node_id, 0)] = prompt[inference]["inputs"]["image"]
    for node_id, node in list(prompt.items()):
        if node["class_type"] in ("MoGeRender", "MoGeInference", "LoadMoGeModel"):
            del prompt[node_id]


def _seed(node_id: str) -> int:
    """A fixed seed per text node: its id, or a hash of it for a node inside a subgraph ("177:102")."""
    return int(node_id) if node_id.isdigit() else zlib.crc32(node_id.encode()) % 2**31


def _name(names: dict[str, str], role: str, kind: str) -> str:
    if role not in names:
        raise KeyError(f"the prompt's {kind} needs the tiny {role!r} file: build it (ltx_tdp_devkit.ltx25_files) and "
                       "pass its name")
    return names[role]


def tiny_prompt(twin: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The twin with model files, text encoders and sizes mapped to the tiny models (see module docstring)."""
    prompt = copy.deepcopy(twin)
    kinds = {n["class_type"] for n in prompt.values()}
    ltx2 = "LTXAVTextEncoderLoader" in kinds or "LTXVConcatAVLatent" in kinds
    diffusion_vae = "VAELoader" in kinds  # LTX-2.5's split files: the video VAELoader loads the diffusion VAE
    context_dim = 32 if ltx2 else 16  # tiny LTX-2 takes text through its connectors: 2 x caption_channels
    renames: dict[tuple[str, int], list] = {}
    audio_vaes = {v[0] for n in prompt.values() for k, v in n["inputs"].items() if k == "audio_vae" and isinstance(v, list)}
    _mock_depth(prompt, renames)
    for node_id, node in list(prompt.items()):
        kind, inputs = node["class_type"], node["inputs"]
        if kind == "UNETLoader":  # the LTX-2.5 templates' int8-convrot transformer
            inputs.update(unet_name=_name(names, "ltx25", kind), weight_dtype="default")
        elif kind == "VAELoader":  # LTX-2.5: one for the video VAE, one for the audio VAE (whose output feeds audio_vae)
            inputs["vae_name"] = _name(names, "ltx25_audio_vae" if node_id in audio_vaes else "ltx25_vae", kind)
        elif kind == "TextGenerateLTX2Prompt":  # the prompt enhancer, a text-generating LLM: passes its prompt on
            del prompt[node_id]
            prompt_in = inputs["prompt"]
            if isinstance(prompt_in, list):
                renames[(node_id, 0)] = prompt_in
            else:
                prompt[node_id] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": prompt_in}}
        elif kind == "LoadImage":
            inputs["image"] = _name(names, "image", kind)
        elif kind == "LoadVideo":
            inputs["file"] = _name(names, "video", kind)
        elif kind == "ImageScale":  # a clip scaled to stage 1's size (the video-upscale example)
            inputs.update(width=STAGE1_SIZE["width"], height=STAGE1_SIZE["height"])
        elif kind == "LoraLoaderModelOnly":  # the IC-LoRA
            inputs["lora_name"] = _name(names, "iclora", kind)
        elif kind == "LoraLoader":  # a LoRA of the (mocked) text encoder for the (mocked) prompt enhancer
            del prompt[node_id]
            renames[(node_id, 0)] = inputs["model"]
            renames[(node_id, 1)] = None
        elif kind == "CheckpointLoaderSimple":
            prompt[node_id] = {"class_type": "UNETLoader",
                               "inputs": {"unet_name": names["ltxav" if ltx2 else "ltxv"], "weight_dtype": "default"}}
            prompt[f"{node_id}_vae"] = {"class_type": "TDPTestVAELoader", "inputs": {"vae_name": names["vae"]}}
            renames[(node_id, 2)] = [f"{node_id}_vae", 0]
            renames[(node_id, 1)] = None  # the checkpoint's CLIP: no workflow uses it
        elif kind in ("LTXAVTextEncoderLoader", "CLIPLoader"):
            del prompt[node_id]
            renames[(node_id, 0)] = None
        elif kind == "CLIPTextEncode":
            prompt[node_id] = {"class_type": "TDPTestRandomConditioning",
                               "inputs": {"seed": _seed(node_id), "tokens": 8, "dim": context_dim}}
        elif kind == "LTXVAudioVAELoader":
            inputs["ckpt_name"] = names["audio_vae"]
        elif kind == "LatentUpscaleModelLoader":
            inputs["model_name"] = names["upsampler"]
        elif kind == "LoadLatent":
            inputs["latent"] = names["latent"]
        elif kind == "EmptyLTXVLatentVideo":
            inputs.update(STAGE1_SIZE)
        elif kind == "LTXVEmptyLatentAudio":
            inputs["frames_number"] = STAGE1_SIZE["length"]
        elif kind == "LTXVScheduler":
            inputs["steps"] = 3
        elif kind == "LTXTDPTileConfig":
            for axis in ("frames", "height", "width"):
                inputs[f"{axis}_overlap"] = min(inputs[f"{axis}_overlap"], 2)
        elif kind == "LTXTDPTileSizeConfig":
            inputs["min_overlap"] = min(inputs["min_overlap"], 2)
        elif kind == "LTXTDPMultiGPULauncher":
            inputs.update(ranks=GROUP_RANKS, devices="", backend="gloo", timeout_s=120)
        elif kind == "LTXTDPTiledVAEDecode":
            inputs.update(DIFFUSION_DECODE_TILES if diffusion_vae else DECODE_TILES)
    for node in prompt.values():
        for name, value in list(node["inputs"].items()):
            if isinstance(value, list) and len(value) == 2 and (value[0], value[1]) in renames:
                target = renames[(value[0], value[1])]
                assert target is not None, f"{node['class_type']}.{name} uses an output the tiny mapping removed"
                node["inputs"][name] = target
    return prompt
