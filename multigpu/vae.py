"""The tiled VAE decode over a group: the VAE replica (NEW_VAE) and the decode itself (DECODE).

A ComfyUI VAE (`comfy.sd.VAE`) holds lambdas, so it cannot be pickled, and ComfyUI 0.3.x's `VideoVAE`
does not keep the config it was built from. Rank 0 therefore sends three things:

* the module's structure: its class and `config` where the module keeps one (current ComfyUI), else the
  module itself pickled with every state-dict tensor replaced by a placeholder (shape and dtype only);
* a `VaeSpec`: the few plain attributes of the VAE that `ltx.vae_decode.decode_tiled` reads besides the
  module (scale factors, channels, dtype, memory estimate, offload flag);
* the weights, as raw bytes in broadcast buckets (like a model's).

A worker rebuilds the module, loads the weights and wraps both in `VaeReplica`, which exposes exactly what
`decode_tiled` uses. Every rank then runs `decode_tiled(..., rank=r, world=n)` (the one blend
implementation) into a CPU fp32 buffer, and the sum over ranks is the single-process decode up to the
order of fp32 additions.

Invariants: rank 0 checks the layout before posting anything (a refused layout never reaches a worker);
the VAE is resent only when `vae_key` changes; a decode keeps the group in step however rank 0's share
ends (error or interrupt: the workers are stopped, the reduction still runs, then rank 0 raises).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import logging
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..ltx.vae_decode import DECODE_SETTINGS, decode_layout, decode_tiled, vae_scales
from ..tiling.vae_axes import AxisScale
from . import protocol as P
from .replica import broadcast_buckets, plan_buckets
from .settings import TDPGroupError

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class VaeSpec:
    """What `decode_tiled` reads from a VAE besides its module, as plain values."""

    scales: tuple[AxisScale, AxisScale, AxisScale]
    latent_channels: int
    output_channels: int
    dtype: torch.dtype
    decode_bytes_per_cell: float
    """ComfyUI's decode memory estimate per latent cell (its estimates for LTX VAEs are linear in cells)."""
    disable_offload: bool


def image_output(image: torch.Tensor) -> torch.Tensor:
    """The map ComfyUI's image VAEs apply to decoded pixels: [-1, 1] -> [0, 1], clamped."""
    return ((image + 1.0) / 2.0).clamp(0.0, 1.0)


# -- rank 0 -------------------------------------------------------------------------------------------------
def vae_key(vae: Any) -> str:
    """Changes when the VAE a decode would run with changes: another module, dtype or weights.

    The weights enter as a hash of a few evenly spaced values of every tensor (cheap; catches a new VAE
    allocated where a freed one was, and weights changed in place).
    """
    model = vae.first_stage_model
    sample = []
    for tensor in model.state_dict().values():
        flat = tensor.detach().reshape(-1)
        if flat.numel():
            sample.append(flat[:: max(1, flat.numel() // 4)][:4].to(device="cpu", dtype=torch.float64))
    digest = hashlib.sha1(torch.cat(sample).numpy().tobytes() if sample else b"").hexdigest()[:16]
    return f"{id(model):x}/{vae.vae_dtype}/{len(sample)}/{digest}"


def vae_spec(vae: Any) -> VaeSpec:
    """The VaeSpec of a ComfyUI VAE; raises TDPGroupError when a worker could not reproduce its decode."""
    probe = torch.linspace(-1.5, 1.5, 121)
    if not torch.equal(vae.process_output(probe.clone()), image_output(probe)):
        raise TDPGroupError("LTX TDP: this VAE maps its decoded pixels in a way the worker ranks cannot reproduce; "
                            "disconnect tdp_group from the tiled VAE decode to decode on this machine")
    channels = int(vae.latent_channels)
    per_cell = float(vae.memory_used_decode((1, channels, 1, 1, 1), vae.vae_dtype))
    return VaeSpec(scales=vae_scales(vae), latent_channels=channels,
                   output_channels=int(getattr(vae, "output_channels", 3)), dtype=vae.vae_dtype,
                   decode_bytes_per_cell=per_cell, disable_offload=bool(getattr(vae, "disable_offload", False)))


class _StructurePickler(pickle.Pickler):
    """Pickles a module tree with the tensors in `weights` (by identity) as (is_parameter, dtype, shape)."""

    def __init__(self, file: io.BytesIO, weights: set[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.weights = weights

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and id(obj) in self.weights:
            return ("weight", isinstance(obj, torch.nn.Parameter), obj.dtype, tuple(obj.shape))
        return None


def module_structure(module: torch.nn.Module) -> bytes:
    """The module without its weights: ("config", class, config) when the class is built from a `config`
    it keeps (current ComfyUI's VideoVAE), else ("module", the module with placeholder weights)."""
    config = getattr(module, "config", None)
    try:
        takes_config = "config" in inspect.signature(type(module)).parameters
    except (TypeError, ValueError):
        takes_config = False
    payload = ("config", type(module), config) if isinstance(config, dict) and takes_config else ("module", module)
    weights = {id(t) for t in module.state_dict(keep_vars=True).values()}
    out = io.BytesIO()
    try:
        _StructurePickler(out, weights).dump(payload)
    except Exception as e:
        raise TDPGroupError(f"LTX TDP: this VAE ({type(module).__name__}) cannot be sent to the worker ranks: {e}; "
                            "disconnect tdp_group from the tiled VAE decode to decode on this machine") from e
    return out.getvalue()


def send_vae(session: Any, vae: Any) -> None:
    """NEW_VAE: structure, spec and weights, unless the workers hold this VAE already."""
    key = vae_key(vae)
    if key == session.vae_key:
        return
    module = vae.first_stage_model
    structure, spec = module_structure(module), vae_spec(vae)
    sd = module.state_dict()
    entries, sizes = plan_buckets(list(sd.items()))
    seq = session.post(lambda seq: P.VaeMessage(seq, key, structure, spec, entries, sizes))
    log.info("LTX TDP: sending the VAE to %d worker rank(s): %.1f MiB in %d broadcast(s)", len(session.workers),
             sum(sizes) / 2**20, len(sizes))
    weights = iter(sd.items())
    broadcast_buckets(session, entries, sizes, weights, "while sending the VAE")
    session.wait_acks(seq, "while the workers loaded the VAE")
    session.done()
    session.vae_key = key


def decode(session: Any, vae: Any, samples: Any, settings: dict[str, int],
           progress: ProgressCallback | None = None) -> torch.Tensor:
    """DECODE over a started session of two or more ranks; rank 0 returns the full decode."""
    import comfy.model_management as mm

    latent, plan, shape = decode_layout(vae, samples, **settings)  # refuses a bad layout before posting
    send_vae(session, vae)
    outbox = P.Outbox.of([latent.detach().to("cpu").contiguous()])
    seq = session.post(lambda seq: P.DecodeMessage(seq, session.vae_key, dict(settings), outbox.specs[0],
                                                   tuple(shape)))
    what = f"during tiled VAE decode {seq}"
    if outbox.nbytes:
        session.broadcast(outbox.buffer(session.comm_device), what)
    world, n_tiles = session.world, len(plan.pixels.tiles)

    def on_tile(done: int, total: int) -> None:
        if progress is not None:
            progress(min(done * world, n_tiles), n_tiles)

    failure: BaseException | None = None
    try:
        images = decode_tiled(vae, latent, **settings, rank=0, world=world, progress=on_tile)
    except BaseException as e:  # interrupt (a BaseException in newer ComfyUI) or an error: keep step, then raise
        failure = e
        session.stop_call(seq)
        images = torch.zeros(shape, dtype=torch.float32)

    def on_wait(s: int) -> None:
        if failure is None and mm.processing_interrupted():
            session.stop_call(s)

    session.wait_acks(seq, what, on_wait)
    for chunk in P.reduce_chunks(images.view(-1)):
        reduced = session.all_reduce(chunk, what)
        if reduced is not chunk:
            chunk.copy_(reduced)
    session.done()
    if failure is not None:
        raise failure
    mm.throw_exception_if_processing_interrupted()
    if progress is not None:
        progress(n_tiles, n_tiles)
    return images


def group_decode(group: Any, vae: Any, samples: Any, progress: ProgressCallback | None = None,
                 **settings: int) -> torch.Tensor:
    """`decode_tiled(vae, samples, **settings)` with the tiles spread over `group`'s ranks (see TDPGroup.decode)."""
    unknown = sorted(set(settings) - set(DECODE_SETTINGS))
    if unknown:
        raise TypeError(f"unknown decode settings {', '.join(unknown)}; expected some of {', '.join(DECODE_SETTINGS)}")
    session = group.session()
    with session.lock:
        if session.world == 1:
            return decode_tiled(vae, samples, progress=progress, **settings)
        with session.exchange("a tiled VAE decode"), torch.inference_mode():
            return decode(session, vae, samples, settings, progress)


# -- worker -------------------------------------------------------------------------------------------------
class _StructureUnpickler(pickle.Unpickler):
    """Loads `module_structure`'s pickle; placeholder weights become empty tensors on the meta device."""

    def persistent_load(self, pid: Any) -> Any:
        kind, is_parameter, dtype, shape = pid
        if kind != "weight":
            raise pickle.UnpicklingError(f"unknown placeholder {kind!r}")
        t = torch.empty(shape, dtype=dtype, device="meta")
        return torch.nn.Parameter(t, requires_grad=False) if is_parameter else t


def build_module(structure: bytes, dtype: torch.dtype) -> torch.nn.Module:
    """The module of `module_structure`, its weights not loaded yet.

    Built from a config, it is cast to `dtype` first, as ComfyUI casts a VAE before loading its weights
    (tensors outside the state dict get rank 0's dtype; the weights keep the dtypes rank 0 sends).
    """
    import comfy.model_management as mm

    payload = _StructureUnpickler(io.BytesIO(structure)).load()
    if payload[0] == "config":
        _, cls, config = payload
        module = cls(config=config).to(dtype)
        archive = getattr(mm, "archive_model_dtypes", None)  # current ComfyUI records the dtypes here too
        if archive is not None:
            archive(module)
    else:
        module = payload[1]
    return module.eval()


class VaeReplica:
    """A worker's stand-in for comfy.sd.VAE: exactly what `ltx.vae_decode.decode_tiled` reads.

    `first_stage_model` is the real module (ComfyUI's class); `patcher` a plain ComfyUI ModelPatcher, so
    ComfyUI's model management loads it on this worker's device as it would load a VAE.
    """

    def __init__(self, module: torch.nn.Module, spec: VaeSpec, device: torch.device):
        import comfy.model_management as mm
        import comfy.model_patcher

        self.first_stage_model = module
        self.upscale_ratio = (spec.scales[0].pixel_length, spec.scales[1].factor, spec.scales[2].factor)
        self.latent_channels = spec.latent_channels
        self.output_channels = spec.output_channels
        self.vae_dtype = spec.dtype
        self.device = device
        self.disable_offload = spec.disable_offload
        self.decode_bytes_per_cell = spec.decode_bytes_per_cell
        self.patcher = comfy.model_patcher.ModelPatcher(module, load_device=device,
                                                        offload_device=mm.vae_offload_device())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> float:
        return self.decode_bytes_per_cell * math.prod(shape[2:])

    @staticmethod
    def process_output(image: torch.Tensor) -> torch.Tensor:
        return image_output(image)


def receive_vae(msg: P.VaeMessage, device: torch.device, comm_device: torch.device) -> VaeReplica:
    """NEW_VAE on a worker: take every weight broadcast (even after an error, or rank 0 would wait in one),
    then build the replica. Weights land on ComfyUI's VAE offload device (the CPU unless --gpu-only)."""
    import comfy.model_management as mm
    import torch.distributed as dist

    error: Exception | None = None
    module = None
    try:
        module = build_module(msg.structure, msg.spec.dtype)
    except Exception as e:
        error = e
    home = mm.vae_offload_device()
    weights: dict[str, torch.Tensor] = {}
    for index, size in enumerate(msg.bucket_bytes):
        bucket = torch.empty(size, dtype=torch.uint8, device=comm_device)
        dist.broadcast(bucket, src=0)
        for e in msg.entries:
            if e.bucket == index:
                weights[e.key] = P.unpack(bucket, e.spec).to(device=home, copy=True)
        del bucket
    if error is not None:
        raise error
    result = module.load_state_dict(weights, strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:
        raise TDPGroupError(f"the worker's VAE replica does not match rank 0's (missing {result.missing_keys[:5]}, "
                            f"unexpected {result.unexpected_keys[:5]}); do the ComfyUI versions differ?")
    return VaeReplica(module, msg.spec, device)
