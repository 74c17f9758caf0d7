"""The tiled decode over this machine's devices (one process): which devices a decode uses, a VAE replica on each,
ComfyUI's MultiGPU thread pool for the decode, and the ranks that spread its tiles (`ltx.device_ranks.DeviceRanks`,
the model path's dispatch).

A replica is made as core's Select VAE Device makes a VAE for another device: a copy of the `comfy.sd.VAE` (its
scale factors, estimates and output processing as they are) with its own ComfyUI ModelPatcher (load device that
device, offload device ComfyUI's VAE offload device) around a clean copy of the module (`ModuleRecipe`) holding
the weights the VAE computes with (`PatcherReplica.weights`: weight patches applied). ComfyUI's model management
loads and unloads it and counts its memory like any VAE's. Replicas are cached per (VAE module, device) while the
VAE lives, and made again when its weights change (`PatcherReplica.key`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import Tile
from ...tiling.shares import device_shares, unit_ranges
from ..comfy_internals import DECODE_ON_DEVICES, require
from ..device_ranks import DeviceRanks, DeviceShare
from ..errors import VaeDecodeError
from ..replica import PatcherReplica
from .decoder import prepare_decode
from .job import ModuleRecipe
from .pixels import pixels_on
from .settings import DecodeSettings

log = logging.getLogger(__name__)

DEVICE_CHOICES = ("default", "all")
"""The node's `device` choices (saved in workflows: keep them). "default": the VAE's own device, as ComfyUI
decodes; "all": that device and every other device of its kind ComfyUI sees."""

_replicas: "weakref.WeakKeyDictionary[torch.nn.Module, dict[torch.device, tuple[str, Any]]]" = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()


def decode_devices(vae: Any, choice: str) -> tuple[torch.device, ...]:
    """The devices a decode with the node's `device` choice runs on, the VAE's own first (only it where this ComfyUI
    lists no devices); VaeDecodeError for an unknown choice."""
    import comfy.model_management as mm

    own = torch.device(vae.device)
    if choice == "default":
        return (own,)
    if choice != "all":
        raise VaeDecodeError(f"unknown device choice {choice!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    enumerate_devices = getattr(mm, "get_all_torch_devices", None)  # ComfyUI 0.3.x has none
    if enumerate_devices is None:
        log.warning("LTX TDP: this ComfyUI does not list its devices (get_all_torch_devices); decoding on %s", own)
        return (own,)
    others = [torch.device(d) for d in enumerate_devices() if torch.device(d).type == own.type]
    return (own, *[d for d in others if d != own])


def vae_on(vae: Any, device: torch.device) -> Any:
    """`vae` itself on its own device, else its replica on `device` (made once per VAE module, device and set of
    weights; module docstring)."""
    device = torch.device(device)
    if device == torch.device(vae.device):
        return vae
    source = PatcherReplica(vae.patcher, lambda _patcher: None)
    key = source.key()
    with _lock:
        held = _replicas.setdefault(vae.first_stage_model, {})
        if device in held and held[device][0] == key:
            return held[device][1]
    import comfy.model_management as mm
    import comfy.model_patcher

    module = ModuleRecipe.of(vae.first_stage_model).build()
    weights = {k: t.detach().to(device=mm.vae_offload_device(), copy=True) for k, t in source.weights()}
    module.load_state_dict(weights, strict=True, assign=True)
    replica = copy.copy(vae)
    replica.first_stage_model, replica.device, replica.size = module, device, None
    replica.patcher = comfy.model_patcher.ModelPatcher(module, load_device=device,
                                                       offload_device=mm.vae_offload_device())
    log.info("LTX TDP: made a replica of the VAE (%s) for %s", type(module).__name__, device)
    with _lock:
        held[device] = (key, replica)
    return replica


@dataclass(frozen=True)
class DeviceDecodeJob:
    """One tiled decode as another device runs it (a `DeviceGatherJob`): the same `prepare_decode` on that
    device's replica, with this decode's context and noise (LTX-2.5's diffusion decoder: the one field drawn on the
    VAE's device), loaded by ComfyUI in the calling thread."""

    vae: Any
    latent: torch.Tensor
    settings: DecodeSettings
    context: tuple[int, int]
    noise: torch.Tensor | None

    def tiles_on(self, device: torch.device) -> Callable[[Tile], torch.Tensor]:
        """tile -> its raw pixels (before `process_output`, cropped, the VAE's dtype) in system memory."""
        decode = prepare_decode(vae_on(self.vae, device), self.latent, self.settings, self.context, self.noise)
        with torch.inference_mode():
            decode.load()
        return lambda tile: pixels_on(decode.decode_raw(tile), "cpu")


def device_ranks(devices: tuple[torch.device, ...], tiles: int, pool: Any,
                 progress: Callable[[int, int], None] | None) -> DeviceRanks:
    """The ranks of a decode of `tiles` tiles over `devices` (the VAE's first): one unit per tile, shared as the
    model's units are (`tiling.shares`, equal speeds), run in `pool`; `progress(done, tiles)` counts every
    device's tiles."""
    shares = device_shares(tiles, [1.0] * len(devices))
    log.info("LTX TDP: the decode's %d tiles over %d devices: %s", tiles, len(devices),
             ", ".join(f"{d} {n}" for d, n in zip(devices, shares)))
    return DeviceRanks([DeviceShare(d, r) for d, r in zip(devices, unit_ranges(shares))], pool,
                       on_unit=None if progress is None else lambda done: progress(done, tiles))


@contextlib.contextmanager
def decode_pool(devices: tuple[torch.device, ...]) -> Iterator[Any]:
    """ComfyUI's MultiGPUThreadPool for the devices after the first (one thread each, set to its device), shut
    down when the block ends, so no thread outlives the decode; None with one device or where this ComfyUI has no
    in-process MultiGPU (the calling thread then runs every device's tiles, one device after the other)."""
    if len(devices) < 2 or importlib.util.find_spec("comfy.multigpu") is None:
        yield None
        return
    require(DECODE_ON_DEVICES)
    import comfy.multigpu

    pool = comfy.multigpu.MultiGPUThreadPool(list(devices[1:]))
    try:
        yield pool
    finally:
        pool.shutdown()
