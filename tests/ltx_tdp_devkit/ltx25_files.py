"""Tiny stand-ins for the files ComfyUI's LTX-2.5 templates load (ComfyUI >= 0.32), built with ComfyUI's own
classes and saved the way the real files are, so the templates' stock loaders read them unchanged:

* `UNETLoader`: an LTX-2.5 transformer (tiny_models.LTX25_CONFIG, keyframe marker on), every Linear of its
  transformer blocks quantized int8-convrot in ComfyUI's stored format (rotation groups of 16), as the
  templates' `ltx-2.5-22b-distilled-transformer-comfy-int8-convrot` is (ltx_tdp_devkit.tiny_quant);
* `VAELoader` (video): LTX-2.5's diffusion video VAE (ltx_tdp_devkit.diffusion_vae);
* `VAELoader` (audio): the LTX-2 audio VAE + vocoder, which ComfyUI 0.32+'s VAELoader detects by its keys;
* `LoadImage`: a small picture for the image-to-video template;
* `LoadVideo`: a short clip with a sound track for the video-upscale example (frames, audio, frame rate: what
  `GetVideoComponents` hands on).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .tiny_models import LTX25_CONFIG, LTX25_SWITCHES

MARKER = {"use_keyframes_abs_pos_embedding": True}
"""LTX-2.5's keyframe marker on: ComfyUI turns it on for a file with the key `keyframes_abs_pos_embedding`."""


FILES = {
    "ltx25": "diffusion_models/tdp_tiny_ltx25_int8_convrot.safetensors",
    "ltx25_vae": "vae/tdp_tiny_ltx25_video_vae.safetensors",
    "ltx25_audio_vae": "vae/tdp_tiny_ltx25_audio_vae.safetensors",
}
IMAGE = "tdp_tiny_ltx25_image.png"
"""The input picture (ComfyUI's input folder), 192 x 128."""
CLIP = "tdp_tiny_ltx25_clip.mp4"
"""The input clip (ComfyUI's input folder): 192 x 128, 9 frames at 24 fps, a 440 Hz tone at 16 kHz."""


def build_ltx25_transformer(path: Path, fmt: str = "int8_convrot", seed: int = 0) -> Path:
    """Save the tiny LTX-2.5 transformer quantized in `fmt`, config in the metadata, as UNETLoader reads it."""
    from .tiny_quant import build_quantized_ltxav

    return build_quantized_ltxav(path, fmt, seed, **LTX25_SWITCHES, **MARKER)


def tiny_ltx25_config() -> dict:
    """The tiny LTX-2.5 transformer's LTXAVModel config, marker on (what build_ltx25_transformer saves)."""
    return {**LTX25_CONFIG, **MARKER}


def write_image(path: Path, width: int = 192, height: int = 128, seed: int = 0) -> Path:
    """A smooth seeded RGB picture as a PNG (LoadImage reads it)."""
    from PIL import Image

    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, 4, 6, generator=gen)
    rgb = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((rgb.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()).save(path)
    return path


def write_clip(path: Path, width: int = 192, height: int = 128, frames: int = 9, fps: int = 24, seed: int = 0) -> Path:
    """A short seeded clip with a sound track, written by ComfyUI's own video class (as SaveVideo writes one)."""
    from fractions import Fraction

    from comfy_api.latest import InputImpl, Types

    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(frames, 3, 4, 6, generator=gen)
    rgb = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    rate = 16000
    t = torch.arange(int(rate * frames / fps)) / rate
    audio = {"waveform": (0.3 * torch.sin(2 * torch.pi * 440 * t)).reshape(1, 1, -1), "sample_rate": rate}
    clip = InputImpl.VideoFromComponents(Types.VideoComponents(images=rgb.permute(0, 2, 3, 1).contiguous(),
                                                               frame_rate=Fraction(fps), audio=audio))
    path.parent.mkdir(parents=True, exist_ok=True)
    clip.save_to(str(path), format=Types.VideoContainer.MP4, codec=Types.VideoCodec.H264)
    return path


def build_ltx25_files(comfy_base: Path) -> dict[str, str]:
    """Every tiny file the LTX-2.5 templates load, in `comfy_base`'s model and input folders; names by role."""
    from . import diffusion_vae
    from .tiny_workflow_models import build_ltx2_audio_vae

    models = comfy_base / "models"
    names = {"ltx25": build_ltx25_transformer(models / FILES["ltx25"]).name,
             "ltx25_vae": diffusion_vae.build_file(models / FILES["ltx25_vae"]).name,
             "ltx25_audio_vae": build_ltx2_audio_vae(models / FILES["ltx25_audio_vae"]).name,
             "image": write_image(comfy_base / "input" / IMAGE).name,
             "video": write_clip(comfy_base / "input" / CLIP).name}
    return names
