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


def build_tokenwise_ltxv(path: Path, seed: int = 0, **overrides) -> Path:
    """`build_ltxv` with every attention's output projection zeroed (`attn1`, `attn2`: `to_out.0.weight`): each
    token's prediction then depends on that token alone (and the timestep), so TDP's tiles predict every token as
    the untiled call does and a 2 x 2 TDP run equals the untiled one within the blend's fp32 rounding. The check
    that tells a per-tile step cache (which mixes tiles) from one that sees the whole frame."""
    import comfy.ldm.lightricks.model as ltx
    import comfy.ops

    config = {**LTXV_CONFIG, **overrides}
    model = ltx.LTXVModel(**config, operations=comfy.ops.disable_weight_init)
    sd = seeded_state_dict(model, seed)
    zeroed = [k for k in sd if (".attn1.to_out.0.weight" in k or ".attn2.to_out.0.weight" in k)]
    assert zeroed, "no attention output projection found in the LTXV state dict"
    for key in zeroed:
        sd[key] = torch.zeros_like(sd[key])
    return save_with_config(sd, path, {"transformer": config})


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


LTX25_SWITCHES = {
    "causal_temporal_positioning": True,
    "apply_gated_attention": True,
    "cross_attention_adaln": True,
    "caption_proj_before_connector": True,
    "ff_bias": False,
    "audio_ff_bias": False,
}
"""The switches that make ComfyUI's LTXAVModel an LTX-2.5 transformer. ComfyUI reads them from the checkpoint's
metadata config (comfy/model_detection.py: the LTX branch updates the detected config with `transformer`); the
keyframe marker it detects from the key `keyframes_abs_pos_embedding` alone, so the marker is not in this dict."""

LTX25_CONFIG = {**LTXAV_CONFIG, **LTX25_SWITCHES}
"""A tiny LTX-2.5 transformer: LTX-2's tiny audio + video widths with the LTX-2.5 switches."""

LTX25_MIN_VERSION = (0, 32)
LTX25_SKIP_REASON = "needs ComfyUI >= 0.32 (LTX-2.5)"


def has_ltx25() -> bool:
    """Whether this ComfyUI has LTX-2.5's transformer: an LTXAVModel with the keyframe marker and bias-free
    feed-forwards (ComfyUI 0.32+). Detected from the classes, never assumed from a version."""
    import inspect

    if not has_ltxav():
        return False
    from comfy.ldm.lightricks.av_model import LTXAVModel
    from comfy.ldm.lightricks.model import LTXBaseModel

    base = inspect.signature(LTXBaseModel.__init__).parameters
    av = inspect.signature(LTXAVModel.__init__).parameters
    return ("use_keyframes_abs_pos_embedding" in base and "ff_bias" in av and "audio_ff_bias" in av
            and hasattr(LTXAVModel, "keyframes_abs_pos_mask"))


def ltx25_expected(version: str) -> bool:
    """Whether a ComfyUI of this version string must have LTX-2.5 (>= 0.32): there an LTX-2.5 test may not skip."""
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= LTX25_MIN_VERSION


def ltx25_module(seed: int = 0, marker: bool = True, **overrides):
    """A tiny LTX-2.5 transformer (ComfyUI's own LTXAVModel with LTX25_CONFIG and `overrides`), its weights seeded
    random numbers (the keyframe marker too, so that it changes what it marks). Only where `has_ltx25()`."""
    from comfy.ldm.lightricks.av_model import LTXAVModel
    import comfy.ops

    config = {**LTX25_CONFIG, **overrides}
    model = LTXAVModel(**config, use_keyframes_abs_pos_embedding=marker, operations=comfy.ops.disable_weight_init)
    model.load_state_dict(seeded_state_dict(model, seed))
    return model


def ltx25_state_dict(seed: int = 0, marker: bool = True, **overrides) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, metadata) of a tiny LTX-2.5 transformer, as a split LTX-2.5 diffusion-model file holds them:
    `comfy.sd.load_diffusion_model_state_dict(sd, metadata=metadata)` (UNETLoader's path) detects it as LTXAV with
    the marker on and the LTX-2.5 switches from the metadata."""
    model = ltx25_module(seed, marker, **overrides)
    config = {**LTX25_CONFIG, **overrides}
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    return sd, {"config": json.dumps({"transformer": config})}


def build_ltx25(path: Path, seed: int = 0, marker: bool = True, **overrides) -> Path:
    """Save a tiny LTX-2.5 transformer that UNETLoader loads as LTX-2.5 (see `ltx25_state_dict`)."""
    sd, metadata = ltx25_state_dict(seed, marker, **overrides)
    return save_with_config(sd, path, json.loads(metadata["config"]))


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
