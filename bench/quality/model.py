"""The benchmark's model: ComfyUI's own LTXVModel, saved as a checkpoint and loaded by ComfyUI's UNETLoader.

Fresh weights are initialised here (ComfyUI builds its layers without initialising them); the checkpoint
carries its constructor config in the safetensors metadata, which ComfyUI's model detection reads, so the
trained model is loaded exactly as a user loads an LTX checkpoint.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch

from .config import ModelConfig

FRAME_RATE = 25.0
CONTEXT_SEED = 99
"""Seed of the one fixed text context (`context`): torch.randn of (1, context_tokens, caption_channels)."""
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "trained" / "ltxv_quality.safetensors"
"""The trained model shipped with the repository (`run.py --ship` writes it; the main job, scripts/run_example.sh,
runs it)."""


def init_state_dict(cfg: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Initial weights of ComfyUI's LTXVModel for `cfg`: Xavier-uniform matrices, zero biases, unit norms,
    small adaLN tables and a zero output projection (the untrained model predicts x0 = its input)."""
    import comfy.ldm.lightricks.model as ltx
    import comfy.ops

    module = ltx.LTXVModel(**cfg.transformer_config(), operations=comfy.ops.disable_weight_init)
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for name, tensor in module.state_dict().items():
        if not tensor.is_floating_point():
            sd[name] = tensor.clone()
        elif name.startswith("proj_out."):
            sd[name] = torch.zeros_like(tensor)
        elif "scale_shift_table" in name:
            sd[name] = torch.randn(tensor.shape, generator=gen) / math.sqrt(tensor.shape[-1])
        elif name.endswith(".bias"):
            sd[name] = torch.zeros_like(tensor)
        elif tensor.ndim == 1:
            sd[name] = torch.ones_like(tensor)
        else:
            fan_out, fan_in = tensor.shape[0], math.prod(tensor.shape[1:])
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            sd[name] = (torch.rand(tensor.shape, generator=gen) * 2 - 1) * bound
    return {k: v.contiguous() for k, v in sd.items()}


def save_checkpoint(sd: dict[str, torch.Tensor], path: Path, cfg: ModelConfig) -> Path:
    """Save `sd` as safetensors with `{"config": {"transformer": ...}}` metadata, as ComfyUI's loader reads it."""
    from ltx_tdp_devkit.tiny_models import save_with_config

    return save_with_config({k: v.detach().float().contiguous() for k, v in sd.items()}, path,
                            {"transformer": cfg.transformer_config()})


def load_model(checkpoint: Path) -> Any:
    """ComfyUI's MODEL for `checkpoint`, through UNETLoader (the file is linked into its diffusion_models folder)."""
    import folder_paths

    from ltx_tdp_devkit import comfy_runtime

    folder = Path(folder_paths.get_folder_paths("diffusion_models")[0])
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / checkpoint.name
    if target.resolve() != checkpoint.resolve():
        shutil.copyfile(checkpoint, target)
    folder_paths.filename_list_cache.clear()
    (model,) = comfy_runtime.run_node("UNETLoader", unet_name=checkpoint.name, weight_dtype="default")
    return model


def context(cfg: ModelConfig, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The one fixed text context (an "empty prompt") the model is trained and sampled with, and its mask."""
    gen = torch.Generator().manual_seed(CONTEXT_SEED)
    ctx = torch.randn(1, cfg.context_tokens, cfg.caption_channels, generator=gen)
    return ctx.expand(batch, -1, -1).contiguous(), torch.ones(batch, cfg.context_tokens, dtype=torch.long)


def conditioning(cfg: ModelConfig) -> list:
    """The fixed context as ComfyUI CONDITIONING (what a text encoder node would output)."""
    ctx, mask = context(cfg)
    return [[ctx, {"attention_mask": mask, "frame_rate": FRAME_RATE}]]
