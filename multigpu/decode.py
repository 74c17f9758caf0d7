"""The tiled VAE decode over a group: the VAE's replica recipe and the decode job.

A ComfyUI VAE holds lambdas and ComfyUI 0.3.x's `VideoVAE` does not keep its config, so the recipe is the
module pickled with placeholders for its weights, plus a `VaeSpec` (the plain attributes the decode reads).
Only rank 0 holds the frames: a worker sends each tile, window-weighted, to rank 0 (README, "Multi-GPU").
"""

from __future__ import annotations

import io
import math
import pickle
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..ltx.vae_decode import TiledDecode, prepare_decode, vae_scales, video_latent
from ..tiling import Tile, blend_tiles, owner_of
from ..tiling.seam import BeforeTile
from ..tiling.vae_axes import AxisScale
from .settings import TDPGroupError


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


class _StructurePickler(pickle.Pickler):
    """Pickles a module tree with the tensors in `weights` (by identity) as (is_parameter, dtype, shape)."""

    def __init__(self, file: io.BytesIO, weights: set[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.weights = weights

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and id(obj) in self.weights:
            return ("weight", isinstance(obj, torch.nn.Parameter), obj.dtype, tuple(obj.shape))
        return None


class _StructureUnpickler(pickle.Unpickler):
    """Loads `_StructurePickler`'s pickle; placeholder weights become empty tensors on the meta device."""

    def persistent_load(self, pid: Any) -> Any:
        kind, is_parameter, dtype, shape = pid
        if kind != "weight":
            raise pickle.UnpicklingError(f"unknown placeholder {kind!r}")
        t = torch.empty(shape, dtype=dtype, device="meta")
        return torch.nn.Parameter(t, requires_grad=False) if is_parameter else t


@dataclass(frozen=True)
class VaeRecipe:
    """A VAE without its weights (its module pickled with placeholders for the weights), and its spec."""

    structure: bytes
    spec: VaeSpec

    @classmethod
    def of(cls, vae: Any) -> "VaeRecipe":
        probe = torch.linspace(-1.5, 1.5, 121)
        if not torch.equal(vae.process_output(probe.clone()), image_output(probe)):
            raise TDPGroupError("LTX TDP: this VAE maps its decoded pixels in a way the worker ranks cannot "
                                "reproduce; disconnect tdp_group from the tiled VAE decode to decode on this machine")
        module, channels = vae.first_stage_model, int(vae.latent_channels)
        spec = VaeSpec(vae_scales(vae), channels, int(getattr(vae, "output_channels", 3)), vae.vae_dtype,
                       float(vae.memory_used_decode((1, channels, 1, 1, 1), vae.vae_dtype)),
                       bool(getattr(vae, "disable_offload", False)))
        out = io.BytesIO()
        try:
            _StructurePickler(out, {id(t) for t in module.state_dict(keep_vars=True).values()}).dump(module)
        except Exception as e:
            raise TDPGroupError(f"LTX TDP: this VAE ({type(module).__name__}) cannot be sent to the worker ranks: "
                                f"{e}; disconnect tdp_group from the tiled VAE decode to decode on this machine") from e
        return cls(out.getvalue(), spec)

    def build(self, device: torch.device, source_package: str) -> tuple[torch.nn.Module, torch.device]:
        """The module with meta weights, and ComfyUI's VAE offload device, where its weights wait between decodes."""
        import comfy.model_management as mm

        return _StructureUnpickler(io.BytesIO(self.structure)).load().eval(), mm.vae_offload_device()

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


@dataclass(frozen=True)
class DecodeJob:
    """One tiled decode as a worker runs it: `prepare_decode(vae, latent, **settings)`, then tile by tile."""

    latent: torch.Tensor
    settings: dict[str, int]

    def prepare(self, vae: Any) -> TiledDecode:
        return prepare_decode(vae, self.latent, **self.settings)

    @staticmethod
    def weighted_tile(decode: TiledDecode, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s window-weighted pixels (batch, channels, *tile.shape), fp32 on the CPU."""
        return decode.decode_tile(tile).to(device="cpu", dtype=torch.float32) * tile.window()


@dataclass
class Gather:
    """A job whose workers send each tile's window-weighted result to rank 0, which adds it into `out`."""

    job: Any
    plan: Any
    out: torch.Tensor
    received: int = 0
    """Rank 0 has received every worker tile with a lower index."""

    @property
    def lead(self) -> tuple[int, ...]:
        """The leading (untiled) axes of its tiles, e.g. (batch, channels)."""
        return tuple(self.out.shape[: self.out.ndim - len(self.plan.shape)])

    def receive(self, session: Any, what: str, before: int) -> None:
        """Rank 0: receive the worker tiles with an index below `before`, in tile order, into `out`. Called
        before rank 0's own tile `before`: the workers' tiles enumerated before it are ready by then."""
        for tile in self.plan.tiles[self.received:before]:
            src = owner_of(tile.index, session.world)
            if src:
                buffer = torch.empty((*self.lead, *tile.shape), dtype=torch.float32, device=session.comm_device)
                session.collective(what, lambda: dist.irecv(buffer, src=src))
                self.out[(Ellipsis, *tile.slices)] += buffer.to(self.out.device)
            self.received = tile.index + 1


def group_decode(group: Any, vae: Any, samples: Any, progress: Any = None, **settings: int) -> torch.Tensor:
    """`decode_tiled(vae, samples, **settings)` with the tiles spread over `group`'s ranks: the same
    (batch, frames, height, width, channels) fp32 CPU frames, held by rank 0 only."""
    import comfy.model_management as mm

    decode = prepare_decode(vae, samples, **settings)  # refuses bad settings or a bad layout before anything is posted
    plan = decode.plan.pixels
    images = torch.zeros(decode.output_shape, dtype=torch.float32)
    out = images.permute(0, 4, 1, 2, 3)  # blend over trailing (frames, height, width); channels-last result
    job = Gather(DecodeJob(video_latent(samples).detach().to("cpu"), dict(settings)), plan, out)

    def partial(rank: int, world: int, before_tile: BeforeTile) -> torch.Tensor:
        n = len(plan.tiles)

        def before(tile: Tile) -> None:
            mm.throw_exception_if_processing_interrupted()
            if before_tile is not None:
                before_tile(tile)

        def on_tile(done: int, total: int, tile: Tile) -> None:
            if progress is not None:
                progress(min(done * world, n), n)

        with torch.inference_mode():
            blend_tiles(plan, lambda t: decode.decode_tile(t).to("cpu"), rank=rank, world=world, out=out,
                        before_tile=before, on_tile=on_tile)
        return out

    with torch.inference_mode():
        group.seam("vae", lambda: vae.patcher, lambda _patcher: VaeRecipe.of(vae)).reduce(job, partial)
    mm.throw_exception_if_processing_interrupted()
    if progress is not None:
        progress(len(plan.tiles), len(plan.tiles))
    return images
