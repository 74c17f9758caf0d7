"""Facts of a loaded ComfyUI LTX MODEL that the patcher and the nodes read: its LTX diffusion model (or a refusal),
its latent-to-pixel geometry and the position range it was trained on."""

from __future__ import annotations

from typing import Any

import torch

from ...tiling import LatentGeometry, PositionRange
from ..errors import UnsupportedInput


def ltx_diffusion_model(model_patcher: Any) -> Any:
    """The LTX diffusion model inside a ComfyUI MODEL, or an UnsupportedInput saying why this is not one."""
    diffusion_model = getattr(getattr(model_patcher, "model", None), "diffusion_model", None)
    if diffusion_model is None or not hasattr(diffusion_model, "patchifier") or not hasattr(diffusion_model, "vae_scale_factors"):
        name = type(diffusion_model).__name__ if diffusion_model is not None else type(model_patcher).__name__
        raise UnsupportedInput(f"TDP needs an LTX-Video or LTX-2 model; this MODEL is {name}")
    return diffusion_model


def geometry_of(diffusion_model: Any) -> LatentGeometry:
    """The model's own latent-to-pixel map: its VAE scale factors and causal time fix."""
    return LatentGeometry.of_factors(diffusion_model.vae_scale_factors,
                                     bool(getattr(diffusion_model, "causal_temporal_positioning", False)))


def position_range(model_patcher: Any) -> PositionRange | None:
    """The trained position range of a loaded LTX MODEL: its transformer's `positional_embedding_max_pos` (which
    ComfyUI takes from the checkpoint's metadata config when it has one); None for a MODEL that is not LTX."""
    dm = getattr(getattr(model_patcher, "model", None), "diffusion_model", None)
    max_pos = getattr(dm, "positional_embedding_max_pos", None)
    if max_pos is None or len(max_pos) != 3:
        return None
    return PositionRange.of_max_pos(max_pos)


def inference_dtype(base_model: Any) -> torch.dtype:
    """The dtype a ComfyUI BaseModel casts the diffusion model's input to, so the dtype its layers compute in: its
    `get_dtype_inference()`, or on ComfyUI 0.3.x (which lacks it) the same rule: the manual-cast dtype, else the
    diffusion model's own."""
    if hasattr(base_model, "get_dtype_inference"):
        return base_model.get_dtype_inference()
    return getattr(base_model, "manual_cast_dtype", None) or base_model.get_dtype()
