"""LTX-2.5's diffusion video VAE (ComfyUI >= 0.32's `CausalDiffusionVAE`), tiny and at its published
configuration, built with ComfyUI's own class and loaded by ComfyUI's own loader (`comfy.sd.VAE` from a state
dict and the `{"config": json({"vae": cfg})}` metadata that VAELoader passes on).

ComfyUI detects this VAE by the key `decoder.conv_in_x_t.weight`. Without metadata it builds the published
configuration, so a state dict of the tiny one must travel with its config. Weights are seeded random numbers:
PyTorch's default initialisation for the linear layers, N(0, 0.1) for the AdaLN tables (zero at construction,
which would make every modulation vanish), unit latent statistics.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from .real_vae import randomise
from .tiny_models import LTX25_SKIP_REASON

SKIP_REASON = f"{LTX25_SKIP_REASON}: no CausalDiffusionVAE (comfy.ldm.lightricks.vae.na_diffusion_decoder)"
"""The reason an LTX-2.5 test skips on ComfyUI 0.24 and 0.3.75 (tests/conftest.py lets it skip there)."""

TINY_ENCODER = {
    "dims": 3, "in_channels": 3, "out_channels": 128,
    "blocks": [["res_x", {"num_layers": 1}], ["compress_all", {}], ["compress_all", {}], ["compress_all", {}]],
    "patch_size": 4, "latent_log_var": "constant", "norm_layer": "pixel_norm", "base_channels": 8,
    "spatial_padding_mode": "zeros",
}
"""A tiny conv encoder with LTX's scale factors (the encoder is LTX-2's conv encoder; the tests decode)."""

TINY_DECODER = {
    "in_channels": 128, "out_channels": 3, "patch_size": 4, "head_dim": 16,
    "stage_channels": [128, 64, 32, 32, 16],
    "stage_depths": [1, 2, 1, 1, 2],
    "stage_kernels": [[3, 7, 7], [3, 7, 7], [3, 5, 5], [3, 5, 5], [11, 11, 11]],
    "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 2], [[2, 2, 2], 1], [[2, 2, 2], 2]],
    "stage5_kernel": [11, 11, 11],
    "timestep_scale_multiplier": 1000.0,
    "default_num_inference_steps": 1,
}
"""The published decoder's layers (kernels, upsample strides, channel ratios C, C/2, C/4, C/4, C/8) at C = 128
and depths 1, 2, 1, 1, 2."""

TINY_CONFIG = {"_class_name": "CausalDiffusionVAE", "dims": 3, "model_output_type": "x0",
               "encoder": TINY_ENCODER, "decoder": TINY_DECODER}


def has_diffusion_vae() -> bool:
    """Whether this ComfyUI has LTX-2.5's diffusion video VAE (ComfyUI >= 0.32)."""
    try:
        from comfy.ldm.lightricks.vae.na_diffusion_decoder import CausalDiffusionVAE  # noqa: F401
    except ImportError:
        return False
    return True


def published_config() -> dict:
    """A copy of the configuration ComfyUI builds for an LTX-2.5 VAE file without metadata."""
    from comfy.ldm.lightricks.vae.na_diffusion_decoder import LTX_24_VAE_CONFIG

    return copy.deepcopy(LTX_24_VAE_CONFIG)


def tiny_config(**decoder: Any) -> dict:
    """A copy of TINY_CONFIG with `decoder` entries replaced (e.g. default_num_inference_steps=2)."""
    config = copy.deepcopy(TINY_CONFIG)
    config["decoder"].update(copy.deepcopy(decoder))
    return config


def module(config: dict | None = None, seed: int = 0) -> torch.nn.Module:
    """ComfyUI's CausalDiffusionVAE at `config` (default: tiny), random weights (real_vae.randomise: seeded default
    initialisation, N(0, 0.1) AdaLN tables, unit latent statistics), eval mode."""
    from comfy.ldm.lightricks.vae.na_diffusion_decoder import CausalDiffusionVAE

    return randomise(CausalDiffusionVAE(config=copy.deepcopy(config or TINY_CONFIG)), seed).eval()


def state_dict(config: dict | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """The state dict of `module(config, seed)`: what an LTX-2.5 VAE file holds (contiguous tensors)."""
    return {k: v.contiguous() for k, v in module(config, seed).state_dict().items()}


def metadata(config: dict | None = None) -> dict[str, str]:
    """The safetensors metadata that carries `config` (default: tiny) to ComfyUI's VAE loader."""
    return {"config": json.dumps({"vae": config or TINY_CONFIG})}


def load(config: dict | None = None, seed: int = 0) -> Any:
    """A comfy.sd.VAE built by ComfyUI's own loader from `state_dict(config, seed)` and `metadata(config)`."""
    import comfy.sd

    return comfy.sd.VAE(sd=state_dict(config, seed), metadata=metadata(config))


def build_file(path: Path, config: dict | None = None, seed: int = 0) -> Path:
    """Save the VAE as safetensors with its config in the metadata (VAELoader reads it on ComfyUI >= 0.32)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state_dict(config, seed), str(path), metadata=metadata(config))
    return path
