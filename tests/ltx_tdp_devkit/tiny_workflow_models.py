"""Tiny stand-ins for the other files the example workflows and templates load: LTX-2 audio VAE, latent upscaler,
a saved latent, an IC-LoRA, a video. Built with ComfyUI's own classes (or formats) and saved the way the real
files are, so ComfyUI's stock loaders (LTXVAudioVAELoader, LatentUpscaleModelLoader, LoadLatent,
LoraLoaderModelOnly, LoadVideo) read them unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .tiny_models import save_with_config, seeded_state_dict

AUDIO_VAE_CONFIG = {
    "model": {"params": {
        "ddconfig": {"double_z": True, "mel_bins": 64, "z_channels": 8, "resolution": 256, "downsample_time": False,
                     "in_channels": 2, "out_ch": 2, "ch": 8, "ch_mult": [1, 2, 4], "num_res_blocks": 1,
                     "attn_resolutions": [], "dropout": 0.0, "mid_block_add_attention": False, "norm_type": "pixel",
                     "causality_axis": "height"},
        "sampling_rate": 16000}},
    "preprocessing": {"stft": {"filter_length": 1024, "hop_length": 160}},
}
"""A tiny LTX-2 audio autoencoder with the real latent layout: 8 channels x 16 frequency bins (64 mel bins / 4),
25 latents a second (16 kHz / hop 160 / 4)."""

VOCODER_CONFIG = {"resblock_kernel_sizes": [3], "upsample_rates": [10, 16], "upsample_kernel_sizes": [20, 32],
                  "resblock_dilation_sizes": [[1, 3, 5]], "upsample_initial_channel": 16, "stereo": True,
                  "output_sample_rate": 16000}
"""A tiny HiFi-GAN vocoder: stereo mel in, x160 (the mel hop) out, so 16 kHz audio, a rate AAC can encode."""

LATENT_UPSAMPLER_CONFIG = {"in_channels": 128, "mid_channels": 32, "num_blocks_per_stage": 1, "dims": 3,
                           "spatial_upsample": True, "temporal_upsample": False, "spatial_scale": 2.0,
                           "rational_resampler": False}
"""A tiny LTX latent upsampler: x2 in height and width, 128 latent channels (GroupNorm needs 32 | mid_channels)."""


def has_ltx2_audio() -> bool:
    try:
        import comfy.ldm.lightricks.vae.audio_vae  # noqa: F401
    except ImportError:
        return False
    return True


def has_ltx_latent_upsampler() -> bool:
    try:
        import comfy.ldm.lightricks.latent_upsampler  # noqa: F401
    except ImportError:
        return False
    return True


def build_ltx2_audio_vae(path: Path, seed: int = 0) -> Path:
    """An LTX-2 audio VAE + vocoder checkpoint (keys `audio_vae.*`, `vocoder.*`, config in the metadata), as
    LTXVAudioVAELoader reads it from a full LTX-2 checkpoint."""
    from comfy.ldm.lightricks.vae.audio_vae import AudioVAE

    config = {"audio_vae": AUDIO_VAE_CONFIG, "vocoder": VOCODER_CONFIG}
    model = AudioVAE(metadata={"config": json.dumps(config)})
    sd = seeded_state_dict(model, seed, 0.1)
    sd = {("audio_vae." + k[len("autoencoder."):]) if k.startswith("autoencoder.") else k: v for k, v in sd.items()}
    for key in sd:
        if key.endswith("std-of-means"):
            sd[key] = torch.ones_like(sd[key])
        elif key.endswith("mean-of-means"):
            sd[key] = torch.zeros_like(sd[key])
    return save_with_config(sd, path, config)


def build_latent_upsampler(path: Path, seed: int = 0) -> Path:
    """An LTX x2 spatial latent upsampler, as LatentUpscaleModelLoader reads it (config in the metadata)."""
    import inspect

    from comfy.ldm.lightricks.latent_upsampler import LatentUpsampler

    kwargs = {}
    if "operations" in inspect.signature(LatentUpsampler.from_config).parameters:  # ComfyUI 0.32+
        import comfy.ops

        kwargs["operations"] = comfy.ops.disable_weight_init  # what LatentUpscaleModelLoader builds it with
    model = LatentUpsampler.from_config(LATENT_UPSAMPLER_CONFIG, **kwargs)
    return save_with_config(seeded_state_dict(model, seed, 0.05), path, LATENT_UPSAMPLER_CONFIG)


def write_latent(path: Path, samples: torch.Tensor) -> Path:
    """A `.latent` file as SaveLatent writes it (LoadLatent reads it back unscaled)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"latent_tensor": samples.contiguous(), "latent_format_version_0": torch.tensor([])}, str(path))
    return path


ICLORA_LAYERS = ("transformer_blocks.0.attn1.to_q", "transformer_blocks.0.attn1.to_v", "transformer_blocks.0.ff.net.2")
"""The tiny LTX-2 transformer's layers the tiny IC-LoRA changes."""


def build_iclora(path: Path, transformer_config: dict, reference_downscale_factor: int = 2, rank: int = 2,
                 seed: int = 0) -> Path:
    """A rank-`rank` LoRA (`lora_A` / `lora_B` pairs under `diffusion_model.`) of a few layers of the tiny LTX-2
    transformer of `transformer_config`, with the metadata an IC-LoRA carries (`reference_downscale_factor`,
    which ComfyUI's GetICLoRAParameters reads): LoraLoaderModelOnly loads it as it loads the union-control IC-LoRA."""
    from safetensors.torch import save_file

    from comfy.ldm.lightricks.av_model import LTXAVModel
    import comfy.ops

    module = LTXAVModel(**transformer_config, operations=comfy.ops.disable_weight_init)
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for layer in ICLORA_LAYERS:
        out_features, in_features = module.get_submodule(layer).weight.shape
        sd[f"diffusion_model.{layer}.lora_A.weight"] = torch.randn(rank, in_features, generator=gen) * 0.3
        sd[f"diffusion_model.{layer}.lora_B.weight"] = torch.randn(out_features, rank, generator=gen) * 0.3
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path), metadata={"reference_downscale_factor": str(reference_downscale_factor)})
    return path


def write_video(path: Path, frames: int, width: int, height: int, fps: int = 24, seed: int = 0) -> Path:
    """A short smooth seeded video (MPEG-4 part 2 in .mp4, through PyAV, which ComfyUI's LoadVideo reads with)."""
    import av

    from .ltx_helpers import smooth_frames

    pixels = (smooth_frames(frames, height, width, seed) * 255).round().to(torch.uint8).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for frame in pixels:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
