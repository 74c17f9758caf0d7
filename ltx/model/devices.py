"""TDP on ComfyUI's own MultiGPU: every model call's tiles spread over the devices of core's MultiGPU clones.

ComfyUI's MultiGPU CFG Split (`MultiGPU_WorkUnits`) gives the MODEL one deepclone per extra device, loaded
through the loader's own factory; while sampling, the guider's model options carry them as
`multigpu_clones` ({device: patcher}, this device first), with `multigpu_thread_pool` and MultiGPU Options'
relative speeds (`multigpu_options`). Left alone, core would spread the step's conds over the clones and run
TDP's tile loop once per device: nothing to split at cfg 1, and an unbalanced split at cfg > 1.

TDP takes the step over through two public hooks on its clone:

* `calc_cond_batch_wrapper` (CALC_COND_BATCH): runs ComfyUI's cond batching without `multigpu_clones`, so
  the conds go to this device as one batched model call, and hands the clones, the thread pool and the speeds
  to that call as `transformer_options[DEVICES_KEY]` (`ModelDevices`).
* TDP's APPLY_MODEL wrapper finds them there and calls `run_on_devices`: the call is cut into work units
  (`ltx.model.units`, one per tile and, where that finishes sooner, per cond), shared by speed
  (`tiling.shares`) and run by `ltx.device_ranks.DeviceRanks`: this device's units through the rest of the
  wrapper chain here, every other device's units through the same chain on its clone, in core's thread pool.

The clones carry the TDP clone's wrappers, object patches and weight patches (LoRAs): ComfyUI's
`match_multigpu_clones` copies them when sampling starts, whichever side of the TDP patcher the user put the
MultiGPU node. Conds with hooks (per-cond weight patches) are left to core's own cond split.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import TilingError
from ...tiling.ranks import ONE_RANK, Partial
from ...tiling.shares import cond_split, device_shares, unit_ranges
from ..comfy_internals import TILES_ON_DEVICES, require
from ..device_ranks import DeviceRanks, DeviceShare
from ..progress import TileProgress, check_interrupt
from .units import CallInputs, UnitCall, slice_options

log = logging.getLogger(__name__)

DEVICES_KEY = "ltx_tdp_devices"
"""transformer_options key under which a sampling step hands the MultiGPU devices to TDP's model wrapper."""
_CORE_KEYS = ("multigpu_clones", "multigpu_thread_pool")
_warned: set[str] = set()


@dataclass(frozen=True)
class ModelDevices:
    """The devices of core's MultiGPU clones for one sampling step: `devices[0]` is the sampled model's."""

    devices: tuple[torch.device, ...]
    models: dict[torch.device, Any]
    """Each device's ComfyUI BaseModel (its clone's `.model`; devices[0]: the sampled model itself)."""
    speeds: tuple[float, ...]
    pool: Any

    @classmethod
    def of(cls, model: Any, model_options: dict[str, Any]) -> "ModelDevices | None":
        """The MultiGPU devices in a sampling step's `model_options`, or None where there is one device."""
        clones = model_options.get("multigpu_clones") or {}
        if len(clones) < 2:
            return None
        devices = sorted(clones, key=lambda d: clones[d].model is not model)  # stable: the sampled model first
        options = model_options.get("multigpu_options") or {}
        speeds = tuple(float((options.get(d) or {}).get("relative_speed", 1.0)) for d in devices)
        return cls(tuple(devices), {d: clones[d].model for d in devices}, speeds,
                   model_options.get("multigpu_thread_pool"))

    def __deepcopy__(self, memo: dict) -> "ModelDevices":
        return self  # live models and ComfyUI's thread pool, handed on by reference, never copied

    def describe(self, shares: tuple[int, ...]) -> str:
        return ", ".join(f"{d} {n}" for d, n in zip(self.devices, shares))


def _has_hooks(conds: list) -> bool:
    return any(c.get("hooks") is not None for cond in conds if cond for c in cond)


def calc_cond_batch_wrapper(executor, model, conds, x_in, timestep, model_options):
    """The CALC_COND_BATCH wrapper: with MultiGPU clones, the step's conds go to this device as one call that
    carries the devices (DEVICES_KEY) to TDP's model wrapper; without, ComfyUI's own path runs untouched."""
    devices = ModelDevices.of(model, model_options)
    if devices is None:
        return executor(model, conds, x_in, timestep, model_options)
    if _has_hooks(conds):
        _warn_once("hooks", "LTX TDP: conditioning with hooks: ComfyUI's MultiGPU spreads the conds over the devices "
                   "and each device runs its conds' tiles (TDP spreads tiles only for conds without hooks)")
        return executor(model, conds, x_in, timestep, model_options)
    ignore = {**model_options, "ignore_multigpu": True}
    for device in devices.devices[1:]:  # what ComfyUI does for each clone before a step (hook keyframes, callbacks)
        model_options["multigpu_clones"][device].prepare_state(timestep, ignore)
    options = {k: v for k, v in model_options.items() if k not in _CORE_KEYS}
    options["transformer_options"] = {**model_options.get("transformer_options", {}), DEVICES_KEY: devices}
    return executor(model, conds, x_in, timestep, options)


def _containers(value: Any) -> Any:
    """`value` with every dict, list and tuple in it copied (their entries, patch objects and such, kept)."""
    if isinstance(value, dict):
        return {k: _containers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_containers(v) for v in value)
    return value


def device_options(transformer_options: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The transformer options a tile on `device` runs with: tensors moved there, every container copied (ComfyUI's
    `cast_transformer_options` replaces patch, wrapper and callback entries in place with their `.to(device)`
    copies: here only in the copies), DEVICES_KEY dropped, `multigpu_thread_device` set as core sets it.
    Nothing mutable is shared with `transformer_options`; built in the calling thread, before any device runs."""
    import comfy.samplers

    out = {k: (v.to(device) if isinstance(v, torch.Tensor) else _containers(v))
           for k, v in transformer_options.items() if k != DEVICES_KEY}
    comfy.samplers.cast_transformer_options(out, device=device)
    out["multigpu_thread_device"] = device
    return out


@dataclass(frozen=True)
class ModelDeviceJob:
    """The units of one call as another device runs them: the same `UnitCall` built from the inputs moved to
    that device, each tile through the rest of the APPLY_MODEL wrapper chain (after TDP's) on its clone."""

    wrapper: Any
    inputs: CallInputs
    slices: int
    sum_dtype: torch.dtype
    options: dict[torch.device, list[dict[str, Any]]]
    """Each other device's transformer options per cond slice (`device_options` then `slice_options`, built in the
    calling thread)."""
    executor: Any
    devices: ModelDevices

    def partial_on(self, device: torch.device) -> Partial:
        import comfy.patcher_extension as ext

        model = self.devices.models[device]
        call = UnitCall(self.wrapper.settings, self.wrapper.geometry, self.inputs.to(device), self.slices,
                        self.sum_dtype)
        options = self.options[device]
        inner = getattr(model, self.executor.original.__name__)  # the clone's BaseModel._apply_model

        def run(i: int, part: CallInputs):
            def tile(x: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
                chain = ext.WrapperExecutor.new_class_executor(inner, model, self.executor.wrappers,
                                                               self.executor.idx + 1)
                return chain.execute(x, part.t, None, part.c_crossattn, None, options[i], **kw)

            return tile

        return call.running(run)


def run_on_devices(wrapper: Any, devices: ModelDevices, executor: Any, x: torch.Tensor, t: torch.Tensor,
                   c_crossattn: Any, control: Any, transformer_options: dict[str, Any],
                   kwargs: dict[str, Any], dtype: torch.dtype) -> torch.Tensor:
    """One model call of TDP's wrapper (`ltx.model.patch.TDPModelWrapper`) spread over `devices`: its blended
    x0, the same as on one device (bit for bit when no cond is cut apart, `tiling.shares.cond_split`)."""
    require(TILES_ON_DEVICES)
    if wrapper.ranks is not ONE_RANK:
        raise TilingError("this MODEL has both ComfyUI's MultiGPU clones (MultiGPU CFG Split) and a TDP worker group "
                          "(LTX TDP Multi-GPU Launcher); use one: remove MultiGPU CFG Split, or disconnect the "
                          "launcher's tdp_group from the TDP Model Patcher")
    if control is not None:
        raise TilingError("TDP over MultiGPU cannot cut ControlNet inputs per tile; LTX models do not use them")
    inputs = CallInputs(x, t, c_crossattn, kwargs)
    conds = len(transformer_options.get("cond_or_uncond") or ()) or 1
    whole = UnitCall(wrapper.settings, wrapper.geometry, inputs)
    slices = cond_split(whole.tiles, conds, devices.speeds) if inputs.batch % conds == 0 else 1
    call = whole if slices == 1 else UnitCall(wrapper.settings, wrapper.geometry, inputs, slices)
    wrapper.check_range(call.calls[0], kwargs.get("frame_rate"))
    shares = device_shares(call.units, devices.speeds)
    _log_layout(devices, shares, call)
    progress = TileProgress(call.units, transformer_options)
    ranks = DeviceRanks([DeviceShare(d, r) for d, r in zip(devices.devices, unit_ranges(shares))], devices.pool,
                        on_unit=lambda done: progress(done, call.units))

    sliced = slice_options(transformer_options, slices)

    def run(i: int, part: CallInputs):
        return lambda x_tile, kw: executor(x_tile, part.t, None, part.c_crossattn, control, sliced[i], **kw)

    options = {s.device: slice_options(device_options(transformer_options, s.device), slices)
               for s in ranks.shares[1:] if len(s.units)}
    job = ModelDeviceJob(wrapper, inputs, slices, call.sum_dtype, options, executor, devices)
    flat = ranks.reduce(job, call.running(run))
    check_interrupt()
    progress.finish()
    return call.finish(flat, dtype)


class _NoPool:
    """The key of calls that come without ComfyUI's thread pool."""


_NO_POOL = _NoPool()
_logged: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _log_layout(devices: ModelDevices, shares: tuple[int, ...], call: UnitCall) -> None:
    """Say how model calls are spread over the devices: once per sampling run (ComfyUI makes a thread pool per run)
    and again when the layout changes within it."""
    per = "tile" if len(call.calls) == 1 else "tile and cond"
    text = f"{call.units} work units (one per {per}) over {len(devices.devices)} devices: {devices.describe(shares)}"
    key = devices.pool if devices.pool is not None else _NO_POOL
    if _logged.get(key) != text:
        _logged[key] = text
        log.info("LTX TDP: model calls run as %s", text)


def _warn_once(key: str, text: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(text)
