"""Tiny real LTX models, built with ComfyUI's own classes and saved the way real checkpoints are.

Each file carries its config in the safetensors metadata (`{"config": json({"transformer"|"vae": cfg})}`),
so ComfyUI's own loaders (UNETLoader, comfy.sd.VAE) detect and build them like the real thing. Weights are
seeded random numbers: the models compute, they do not draw anything meaningful.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

LTXV_CONFIG = {
    "num_layers": 1,
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "cross_attention_dim": 16,
    "caption_channels": 16,
    "in_channels": 128,
}
"""A one-layer LTXV transformer (heads x head_dim == cross_attention_dim, as the model requires)."""

LTXAV_EXTRA = {
    "audio_num_attention_heads": 2,
    "audio_attention_head_dim": 8,
    "audio_cross_attention_dim": 16,
    "audio_in_channels": 128,
    "connector_num_attention_heads": 2,
    "connector_attention_head_dim": 8,
    "connector_num_layers": 1,
}
"""LTX-2's audio stream and text connectors at the same tiny width. The audio latent (B, 8, T, 16) patchifies
to 8 x 16 = 128 channels per token; the connectors (heads x head_dim == caption_channels) turn raw text
features of width caption_channels into the model's (video, audio) context of width 2 x caption_channels."""

LTXAV_CONFIG = {**LTXV_CONFIG, **LTXAV_EXTRA}

VAE_CONFIG = {
    "_class_name": "CausalVideoAutoencoder",
    "dims": 3,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 128,
    "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_all", {}], ["compress_all", {}], ["compress_all", {}]],
    "decoder_blocks": [["compress_all", {"residual": False, "multiplier": 1}], ["compress_all", {"residual": False, "multiplier": 1}],
                       ["compress_all", {"residual": False, "multiplier": 1}], ["res_x", {"num_layers": 1}]],
    "encoder_base_channels": 8,
    "decoder_base_channels": 8,
    "scaling_factor": 1.0,
    "norm_layer": "pixel_norm",
    "patch_size": 4,
    "latent_log_var": "uniform",
    "use_quant_conv": False,
    "causal_decoder": False,
    "timestep_conditioning": False,
}
"""A tiny causal video VAE with LTX's scale factors: x8 in time (causal first frame), x32 in space."""


def seeded_state_dict(module: torch.nn.Module, seed: int, scale: float = 0.2) -> dict[str, torch.Tensor]:
    """The module's state dict with every float tensor replaced by seeded normal noise x `scale`."""
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for name, tensor in module.state_dict().items():
        if tensor.is_floating_point():
            sd[name] = (torch.randn(tensor.shape, generator=gen) * scale).to(tensor.dtype).contiguous()
        else:
            sd[name] = tensor.clone().contiguous()
    return sd


def save_with_config(sd: dict[str, torch.Tensor], path: Path, metadata: dict) -> Path:
    """Save `sd` as safetensors with `{"config": json(metadata)}`, the way ComfyUI's loaders read configs."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path), metadata={"config": json.dumps(metadata)})
    return path


def build_ltxv(path: Path, seed: int = 0, **overrides) -> Path:
    """Save a tiny LTXV transformer (ComfyUI's LTXVModel) that UNETLoader loads by its keys + metadata.

    `overrides` change the config (e.g. causal_temporal_positioning=True); they travel in the metadata.
    """
    import comfy.ldm.lightricks.model as ltx
    import comfy.ops

    config = {**LTXV_CONFIG, **overrides}
    model = ltx.LTXVModel(**config, operations=comfy.ops.disable_weight_init)
    return save_with_config(seeded_state_dict(model, seed), path, {"transformer": config})


def has_ltxav() -> bool:
    """Whether this ComfyUI has LTX-2's audio+video transformer (ComfyUI >= ~0.8)."""
    try:
        import comfy.ldm.lightricks.av_model  # noqa: F401
    except ImportError:
        return False
    return True


def build_ltxav(path: Path, seed: int = 0, **overrides) -> Path:
    """Save a tiny LTX-2 audio+video transformer (ComfyUI's LTXAVModel) that UNETLoader detects as LTXAV.

    Detection needs `audio_adaln_single.linear.weight` (present in every LTXAVModel); the metadata config
    supplies the tiny widths. Only on runtimes where `has_ltxav()`; `overrides` change the config.
    """
    from comfy.ldm.lightricks.av_model import LTXAVModel
    import comfy.ops

    config = {**LTXAV_CONFIG, **overrides}
    model = LTXAVModel(**config, operations=comfy.ops.disable_weight_init)
    return save_with_config(seeded_state_dict(model, seed), path, {"transformer": config})


def build_vae(path: Path, seed: int = 0) -> Path:
    """Save a tiny LTX video VAE (ComfyUI's VideoVAE) with its config in the metadata."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    vae = VideoVAE(config=VAE_CONFIG)
    sd = seeded_state_dict(vae, seed, scale=0.1)
    # Per-channel statistics: unit std and zero mean keep the latent scale as it is.
    for key in list(sd):
        if key.endswith("std-of-means"):
            sd[key] = torch.ones_like(sd[key])
        elif key.endswith("mean-of-means"):
            sd[key] = torch.zeros_like(sd[key])
    return save_with_config(sd, path, {"vae": VAE_CONFIG})
