"""One tiled decode as another rank receives it (`DecodeJob`), and the VAE's replica on a worker rank: what
the tiled decode reads of a ComfyUI VAE, rebuilt without ComfyUI's lambdas and without rank 0's loader state.

The replica's module is built clean on the worker (`ModuleRecipe`): from its class and the constructor config
ComfyUI keeps on it (`VideoVAE.config` from ComfyUI 0.2x on, `CausalDiffusionVAE.config`), or, where ComfyUI keeps
none (0.3.x's VideoVAE), from its module tree with nothing a ComfyUI model patcher put on it. Its weights follow by
broadcast. Only rank 0 holds the frames: a worker sends each tile's raw pixels (the VAE's dtype, cropped) once rank
0 receives them, and rank 0 processes and blends them as it does its own.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...multigpu.api import Replica
from ...tiling import LatentGeometry, Tile
from ...tiling.ranks import TileRanks
from ..replica import PatcherReplica
from .decoder import prepare_decode
from .inputs import vae_geometry
from .pixels import pixels_on
from .settings import DecodeSettings

PATCHER_STATE = frozenset({
    # ComfyUI's estimate-based model patcher (every version)
    "comfy_cast_weights", "prev_comfy_cast_weights", "comfy_force_cast_weights", "comfy_patched_weights",
    "weight_function", "bias_function", "device", "model_lowvram", "lowvram_patch_counter",
    "model_loaded_weight_memory", "model_offload_buffer_memory", "current_weight_patches_uuid", "current_patcher",
    "skip_injection",
    # Dynamic VRAM (ComfyUI 0.2x on: ModelPatcherDynamic and comfy.ops)
    "dynamic_vbars", "dynamic_pins", "dynamic_patchers", "seed_key", "_pin_state", "_v", "_v_signature",
    "_v_weight", "_v_bias", "_prefetch", "weight_lowvram_function", "bias_lowvram_function",
})
"""Attributes ComfyUI's model loaders put on a module and its layers (`comfy/model_patcher.py`, `comfy/ops.py`):
loader state, never part of what the module computes. `*_comfy_model_dtype` (comfy.sd's record of the dtypes it
loaded) is dropped too: a worker's replica is loaded by its own patcher."""


def _loader_state(name: str) -> bool:
    return name in PATCHER_STATE or name.endswith("_comfy_model_dtype")


def _skeleton(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of `module`'s tree holding its own state (parameters, buffers, settings) and no loader state."""
    copy = type(module).__new__(type(module))
    copy.__dict__.update({k: v for k, v in vars(module).items() if not _loader_state(k)})
    copy._parameters, copy._buffers = dict(module._parameters), dict(module._buffers)  # loading replaces its own
    copy._modules = {name: None if child is None else _skeleton(child) for name, child in module._modules.items()}
    return copy


@dataclass(frozen=True)
class ModuleRecipe:
    """How a worker builds a clean copy of a VAE's module: `kind(config=config)` on the meta device with rank 0's
    non-persistent buffers (`extras`, small), or, for a module that keeps no config, its `skeleton` (pickled with
    placeholders for its weights). Either way its weights are loaded from rank 0's broadcast."""

    kind: type | None
    config: dict | None
    extras: dict[str, torch.Tensor]
    skeleton: torch.nn.Module | None

    @classmethod
    def of(cls, module: torch.nn.Module) -> "ModuleRecipe":
        config = getattr(module, "config", None)
        if isinstance(config, dict) and "config" in inspect.signature(type(module)).parameters:
            held = {k: tuple(t.shape) for k, t in module.state_dict().items()}
            with torch.device("meta"):
                built = type(module)(config=config)
            if {k: tuple(t.shape) for k, t in built.state_dict().items()} == held:
                extras = {k: t for k, t in module.named_buffers() if k not in held}
                return cls(type(module), config, extras, None)
        return cls(None, None, {}, _skeleton(module))

    def build(self) -> torch.nn.Module:
        """The module, its weights on the meta device until loaded, in eval mode."""
        if self.skeleton is not None:
            return self.skeleton.eval()
        with torch.device("meta"):
            module = self.kind(config=self.config)
        for key, value in self.extras.items():
            owner, _, name = key.rpartition(".")
            module.get_submodule(owner)._buffers[name] = value
        return module.eval()


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
    """A VAE's module recipe and its spec."""

    module: ModuleRecipe
    spec: VaeSpec

    @classmethod
    def of(cls, vae: Any) -> "VaeRecipe":
        channels = int(vae.latent_channels)
        return cls(ModuleRecipe.of(vae.first_stage_model), VaeSpec(
            vae_geometry(vae), channels, int(getattr(vae, "output_channels", 3)), vae.vae_dtype,
            float(vae.memory_used_decode((1, channels, 1, 1, 1), vae.vae_dtype)),
            bool(getattr(vae, "disable_offload", False))))

    def build(self, device: torch.device) -> Replica:
        """A VaeReplica of a clean module (meta weights until loaded), its weights waiting between decodes on
        ComfyUI's VAE offload device."""
        import comfy.model_management as mm

        module = self.module.build()
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


@dataclass(frozen=True)
class DecodeJob:
    """One tiled decode as a worker rank runs it: the same `prepare_decode` as rank 0, tile by tile (a
    multigpu.api.GatherJob). Its latent and noise travel after the job's pickle, not inside it."""

    latent: torch.Tensor
    settings: DecodeSettings
    context: tuple[int, int]
    """(time, space) context, as rank 0 resolved it (`TiledDecode.context`)."""
    noise: torch.Tensor | None = None
    """The decode noise as rank 0 drew it where other ranks must take it (`TiledDecode.noise`: LTX-2.5's
    diffusion decoder, whose CUDA generator's numbers depend on the device's model), so every rank's tiles slice
    the one field the untiled decode draws."""
    tile_lead: tuple[int, ...] = (1, 3)
    """(batch, channels) of what a worker sends for a tile: its raw pixels, (*tile_lead, *tile.shape)."""
    tile_dtype: torch.dtype = torch.float32
    """The VAE's dtype, the raw pixels' own."""

    def tiles(self, vae: Any, device: torch.device) -> Callable[[Tile], torch.Tensor]:
        """tile -> its raw pixels (before `process_output`, unweighted), contiguous on `device`."""
        decode = prepare_decode(vae, self.latent, self.settings, self.context, self.noise)
        decode.pixels_to = torch.device(device)
        return lambda tile: pixels_on(decode.decode_raw(tile).to(self.tile_dtype), device)


def vae_ranks(group: Any, vae: Any) -> TileRanks:
    """The ranks of `group` (a multigpu TDPGroup) that share a tiled decode's tiles with `vae`."""
    return group.ranks("vae", lambda: PatcherReplica(vae.patcher, lambda _patcher: VaeRecipe.of(vae)))
