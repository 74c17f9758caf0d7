"""One tiled decode as another rank receives it (`DecodeJob`), and the VAE's replica on a worker rank: what
the tiled decode reads of a ComfyUI VAE, rebuilt without ComfyUI's lambdas.

A ComfyUI VAE holds lambdas and ComfyUI 0.3.x's `VideoVAE` does not keep its config, so the recipe is the
module itself, which the group pickles with placeholders for its weights (they follow by broadcast), plus a
`VaeSpec` (the plain attributes the decode reads). Only rank 0 holds the frames: a worker sends each tile's
window-weighted pixels as soon as it has decoded it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...multigpu.api import Replica
from ...tiling import LatentGeometry, Tile
from ...tiling.ranks import TileRanks
from ..errors import VaeDecodeError
from ..replica import PatcherReplica
from .decoder import prepare_decode
from .inputs import vae_geometry
from .settings import DecodeSettings


def image_output(image: torch.Tensor) -> torch.Tensor:
    """The map ComfyUI's image VAEs apply to decoded pixels: [-1, 1] -> [0, 1], clamped."""
    return ((image + 1.0) / 2.0).clamp(0.0, 1.0)


@dataclass(frozen=True)
class VaeSpec:
    """What the decode reads from a VAE besides its module, as plain values."""

    geometry: LatentGeometry
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
            vae_geometry(vae), channels, int(getattr(vae, "output_channels", 3)), vae.vae_dtype,
            float(vae.memory_used_decode((1, channels, 1, 1, 1), vae.vae_dtype)),
            bool(getattr(vae, "disable_offload", False))))

    def build(self, device: torch.device) -> Replica:
        """A VaeReplica of the module (meta weights until loaded), its weights waiting between decodes on
        ComfyUI's VAE offload device."""
        import comfy.model_management as mm

        module = self.module.eval()
        return Replica(VaeReplica(module, self.spec, device), module, mm.vae_offload_device())


class VaeReplica:
    """A worker's stand-in for comfy.sd.VAE: exactly what the tiled decode reads. `patcher` is a plain
    ComfyUI ModelPatcher, so ComfyUI's model management loads it on this worker's device like a VAE."""

    def __init__(self, module: torch.nn.Module, spec: VaeSpec, device: torch.device):
        import comfy.model_management as mm
        import comfy.model_patcher

        self.first_stage_model = module
        g = spec.geometry
        self.upscale_ratio = (g.frames.pixel_length, g.height.factor, g.width.factor)
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


@dataclass(frozen=True)
class DecodeJob:
    """One tiled decode as a worker rank runs it: the same `prepare_decode` as rank 0, tile by tile."""

    latent: torch.Tensor
    settings: DecodeSettings
    context: tuple[int, int]
    """(time, space) context, as rank 0 resolved it (`TiledDecode.context`)."""
    noise: torch.Tensor | None = None
    """The decode noise as rank 0 drew it where other ranks must take it (`TiledDecode.noise`: LTX-2.5's
    diffusion decoder, whose generator's numbers depend on the device), so every rank's tiles slice the one
    field the untiled decode draws."""

    def tiles(self, vae: Any) -> Callable[[Tile], torch.Tensor]:
        """tile -> its window-weighted pixels (batch, channels, *tile.shape), fp32 on the CPU."""
        decode = prepare_decode(vae, self.latent, self.settings, self.context, self.noise)
        return lambda tile: decode.decode_tile(tile).to(device="cpu", dtype=torch.float32) * tile.window()


def vae_ranks(group: Any, vae: Any) -> TileRanks:
    """The ranks of `group` (a multigpu TDPGroup) that share a tiled decode's tiles with `vae`."""
    return group.ranks("vae", lambda: PatcherReplica(vae.patcher, lambda _patcher: VaeRecipe.of(vae)))
