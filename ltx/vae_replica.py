"""A ComfyUI VAE's replica on a worker rank: what the tiled decode reads of it, rebuilt without ComfyUI's
lambdas.

A ComfyUI VAE holds lambdas and ComfyUI 0.3.x's `VideoVAE` does not keep its config, so the recipe is the
module itself, which the group pickles with placeholders for its weights (they follow by broadcast), plus a
`VaeSpec` (the plain attributes the decode reads). Only rank 0 holds the frames (README, "Multi-GPU").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..tiling.seam import TileGroup
from ..tiling.vae_axes import AxisScale
from .replica_source import PatcherReplica
from .vae_decode import VaeDecodeError, vae_scales


def image_output(image: torch.Tensor) -> torch.Tensor:
    """The map ComfyUI's image VAEs apply to decoded pixels: [-1, 1] -> [0, 1], clamped."""
    return ((image + 1.0) / 2.0).clamp(0.0, 1.0)


@dataclass(frozen=True)
class VaeSpec:
    """What the decode reads from a VAE besides its module, as plain values."""

    scales: tuple[AxisScale, AxisScale, AxisScale]
    latent_channels: int
    output_channels: int
    dtype: torch.dtype
    decode_bytes_per_cell: float
    """ComfyUI's decode memory estimate per latent cell (its estimates for LTX VAEs are linear in cells)."""
    disable_offload: bool


@dataclass(frozen=True)
class VaeRecipe:
    """A VAE's module (pickled with placeholders for its weights) and its spec."""

    module: torch.nn.Module
    spec: VaeSpec

    @classmethod
    def of(cls, vae: Any) -> "VaeRecipe":
        probe = torch.linspace(-1.5, 1.5, 121)
        if not torch.equal(vae.process_output(probe.clone()), image_output(probe)):
            raise VaeDecodeError("this VAE maps its decoded pixels in a way the worker ranks cannot reproduce; "
                                 "disconnect tdp_group from the tiled VAE decode to decode on this machine")
        channels = int(vae.latent_channels)
        return cls(vae.first_stage_model, VaeSpec(
            vae_scales(vae), channels, int(getattr(vae, "output_channels", 3)), vae.vae_dtype,
            float(vae.memory_used_decode((1, channels, 1, 1, 1), vae.vae_dtype)),
            bool(getattr(vae, "disable_offload", False))))

    def build(self, device: torch.device) -> tuple[torch.nn.Module, torch.device]:
        """The module with meta weights, and ComfyUI's VAE offload device, where its weights wait between decodes."""
        import comfy.model_management as mm

        return self.module.eval(), mm.vae_offload_device()

    def wrap(self, module: torch.nn.Module, device: torch.device) -> "VaeReplica":
        return VaeReplica(module, self.spec, device)


class VaeReplica:
    """A worker's stand-in for comfy.sd.VAE: exactly what `ltx.vae_decode` reads. `patcher` is a plain
    ComfyUI ModelPatcher, so ComfyUI's model management loads it on this worker's device like a VAE."""

    def __init__(self, module: torch.nn.Module, spec: VaeSpec, device: torch.device):
        import comfy.model_management as mm
        import comfy.model_patcher

        self.first_stage_model = module
        self.upscale_ratio = (spec.scales[0].pixel_length, spec.scales[1].factor, spec.scales[2].factor)
        self.latent_channels, self.output_channels = spec.latent_channels, spec.output_channels
        self.vae_dtype, self.device, self.disable_offload = spec.dtype, device, spec.disable_offload
        self.decode_bytes_per_cell = spec.decode_bytes_per_cell
        self.patcher = comfy.model_patcher.ModelPatcher(module, load_device=device,
                                                        offload_device=mm.vae_offload_device())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> float:
        return self.decode_bytes_per_cell * math.prod(shape[2:])

    @staticmethod
    def process_output(image: torch.Tensor) -> torch.Tensor:
        return image_output(image)


def vae_runner(group: Any, vae: Any) -> TileGroup:
    """The TileGroup over `group` (a multigpu TDPGroup) of tiled decodes with `vae` (`decode_tiled(group=...)`)."""
    return group.seam("vae", lambda: PatcherReplica(vae.patcher, lambda _patcher: VaeRecipe.of(vae)))
