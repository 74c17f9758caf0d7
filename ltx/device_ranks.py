"""TileRanks over the devices of this process (ComfyUI's MultiGPU): one rank per work unit, threads per device.

A call cut into `world` work units has rank u of world `world` own unit u (`tiling.ranks`: partial(u, world)
is that unit's window-weighted sum). `DeviceRanks.reduce` runs this device's units with `partial` in the
calling thread and every other device's units in ComfyUI's MultiGPU thread pool (core's `MultiGPUThreadPool`,
one thread per device, each set to its device), with `job.partial_on(device)`: the same units computed on that
device's model clone. Each device sums its units in the partials' float64; the sums are added on this device.
Float64 sums of fp32 products do not depend on the order of the terms (`tiling.exact_sum_dtype`), so any split
of the units over the devices gives the bits one device gives.

`DeviceRanks.gather` runs a decode's tiles (one unit each) the same way: this device's blended here, every other
device's decoded in its pool thread on its own VAE replica (`job.tiles_on(device)`), moved to system memory and
blended here in tile order, so the output is one device's bit for bit.

Between units every thread checks ComfyUI's interrupt and a shared stop flag: the first failure or interrupt on
any device stops the others at their next unit, this thread waits for all of them (nothing keeps running), then
raises the failure naming its device, or the interrupt.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..tiling.plan import TilePlan
from ..tiling.ranks import AddTile, Partial
from .progress import check_interrupt


class DeviceJob(Protocol):
    """What the other devices run: the same units as `partial`, computed on their own model clone."""

    def partial_on(self, device: torch.device) -> Partial:
        """partial(unit, world, before_tile) on `device` (called in that device's thread)."""


class DeviceGatherJob(Protocol):
    """What the other devices run of a gather: their tiles, decoded on their own replica."""

    def tiles_on(self, device: torch.device) -> Callable[[Any], torch.Tensor]:
        """tile -> its result in system memory, on `device` (called in the calling thread; the function it returns
        runs in that device's thread)."""


@dataclass(frozen=True)
class DeviceShare:
    """The work units one device runs."""

    device: torch.device
    units: range


class DeviceFailure(RuntimeError):
    """A work unit failed on one device; the message names the device and the original error."""


class _Stopped(Exception):
    """Another device failed or was interrupted: this device stops before its next unit."""


Stopped = _Stopped
"""Raised by a unit that stops because another device failed or was interrupted (e.g. an exchange between the
devices was aborted): `DeviceRanks` counts it as stopped, never as that device's failure."""


class _StopFlag:
    """Set by the first device that fails or takes ComfyUI's interrupt; every device checks it before a unit."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._checking = threading.Lock()

    def set(self) -> None:
        self._set.set()

    def before_unit(self, _tile: Any = None) -> None:
        """Raise _Stopped once the flag is set, else ComfyUI's interrupt if the user pressed Cancel. One step under
        a lock: ComfyUI clears its interrupt flag as it raises, so the thread that takes it sets this flag first."""
        with self._checking:
            if self._set.is_set():
                raise _Stopped()
            try:
                check_interrupt()
            except BaseException:
                self._set.set()
                raise


@dataclass
class _Outcome:
    share: DeviceShare
    total: torch.Tensor | None = None
    error: BaseException | None = None


class DeviceRanks:
    """The devices of one call: `shares[0]` is this device (the calling thread), the others run in `pool`
    (ComfyUI's MultiGPUThreadPool, or None: then this thread runs them after its own). `on_unit(done)` is
    called in the calling thread after each of its units with the number of units done on every device."""

    def __init__(self, shares: Sequence[DeviceShare], pool: Any = None,
                 on_unit: Callable[[int], None] | None = None, unit: str = "a tile"):
        self.shares = tuple(shares)
        self.unit = unit
        """What a work unit is, as a failure names it ("a tile", "a video shard")."""
        self.pool = pool
        self.on_unit = on_unit
        self._done = 0
        self._lock = threading.Lock()

    @property
    def world(self) -> int:
        return sum(len(s.units) for s in self.shares)

    def reduce(self, job: DeviceJob, partial: Partial) -> torch.Tensor:
        """The sum of every unit's partial, on this device; raises after every device has stopped."""
        stop = _StopFlag()
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        own, others = self.shares[0], [s for s in self.shares[1:] if len(s.units)]
        pooled = [s for s in others if self.pool is not None and s.device in self.pool.devices]
        for share in pooled:
            self.pool.submit(share.device, self._run_share, share, stop, grad, inference, job.partial_on)
        outcomes = [self._outcome(own, stop, lambda _device: partial, calling=True)]
        outcomes += [self._outcome(s, stop, job.partial_on) for s in others if s not in pooled]
        for share in pooled:
            total, error = self.pool.get_result(share.device)
            outcomes.append(_Outcome(share, total, error))
        _raise_first(outcomes, self.unit)
        total = None
        for outcome in outcomes:
            if outcome.total is not None:
                part = outcome.total.to(own.device)
                total = part if total is None else total.add_(part)
        if total is None:
            raise ValueError("DeviceRanks.reduce: no device ran a unit")
        return total

    def gather(self, job: DeviceGatherJob, partial: Partial, plan: TilePlan, add: AddTile) -> None:
        """Every tile of `plan` (one unit each: `world` is its tile count) blended into this device's output in
        tile order, so any split over the devices gives one device's bits (the shares are contiguous, this
        device's first): this device's tiles by `partial` here, every other device's decoded in its pool thread by
        `job.tiles_on(device)` (made here, in the calling thread), each tile moved to system memory there and
        blended here by `add`. Raises after every device has stopped, a failure naming its device."""
        if self.world != len(plan.tiles):
            raise ValueError(f"DeviceRanks.gather: {self.world} units for {len(plan.tiles)} tiles")
        stop = _StopFlag()
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        own, others = self.shares[0], [s for s in self.shares[1:] if len(s.units)]
        finished: dict[torch.device, queue.Queue] = {s.device: queue.Queue() for s in others}
        runs: dict[torch.device, Callable[[Any], torch.Tensor]] = {}
        for share in others:  # ComfyUI loads each device's replica in this thread, before any tile runs
            try:
                runs[share.device] = job.tiles_on(share.device)
            except BaseException as e:  # noqa: BLE001 (nothing runs yet: raised at once, naming the device)
                _raise_first([_Outcome(share, None, e)], what="VAE decode")
        pooled = [s for s in others if self.pool is not None and s.device in self.pool.devices]
        for share in pooled:
            self.pool.submit(share.device, self._tiles_of, share, stop, grad, inference, runs[share.device], plan,
                             finished[share.device])
        outcomes = [_Outcome(own)]
        try:
            for unit in own.units:  # `partial` blends each into the output itself
                partial(unit, self.world, stop.before_unit)
                self._count(True)
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 (raised once every device has stopped)
            stop.set()
            outcomes[0].error = e
        for share in others:
            if share not in pooled:  # no pool: this thread decodes them now
                outcomes.append(_Outcome(share))
                try:
                    self._tiles_of(share, stop, grad, inference, runs[share.device], plan, finished[share.device])
                except BaseException as e:  # noqa: BLE001 (reported with its device below)
                    outcomes[-1].error = e
            for unit, result in iter(finished[share.device].get, None):
                if not any(o.error for o in outcomes):
                    add(plan.tiles[unit], result)
                    if self.on_unit is not None:
                        self.on_unit(self._done)
                del result
            if share in pooled:
                outcomes.append(_Outcome(share, *self.pool.get_result(share.device)))
        _raise_first(outcomes, what="VAE decode")

    def _tiles_of(self, share: DeviceShare, stop: _StopFlag, grad: bool, inference: bool,
                  decode: Callable[[Any], torch.Tensor], plan: TilePlan, finished: queue.Queue) -> None:
        """Decode `share`'s tiles (in its device's thread), each put in `finished` as (unit, its result in system
        memory); None is put last, whatever happens."""
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                for unit in share.units:
                    stop.before_unit()
                    finished.put((unit, decode(plan.tiles[unit])))
                    self._count(False)
        except _Stopped:
            return
        except BaseException:
            stop.set()
            raise
        finally:
            finished.put(None)

    def _outcome(self, share: DeviceShare, stop: _StopFlag, partial_on: Callable[[torch.device], Partial],
                 calling: bool = False) -> _Outcome:
        """Run a share in the calling thread (this device's, or another's when there is no pool)."""
        try:
            return _Outcome(share, self._run_share(share, stop, torch.is_grad_enabled(),
                                                   torch.is_inference_mode_enabled(), partial_on, calling))
        except Exception as e:  # noqa: BLE001 (reported with its device once every device has stopped)
            return _Outcome(share, None, e)

    def _run_share(self, share: DeviceShare, stop: _StopFlag, grad: bool, inference: bool,
                   partial_on: Callable[[torch.device], Partial], calling: bool = False) -> torch.Tensor | None:
        """The float64 sum of `share`'s units on its device (None when stopped before any); in the caller's
        autograd mode (thread-local in torch, so a pool thread takes the calling thread's)."""
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                run = partial_on(share.device)
                total = None
                for unit in share.units:
                    part = run(unit, self.world, stop.before_unit)
                    total = part if total is None else total.add_(part)
                    del part
                    self._count(calling)
                return total
        except _Stopped:
            return None
        except BaseException:
            stop.set()
            raise

    def _count(self, calling: bool) -> None:
        with self._lock:
            self._done += 1
            done = self._done
        if calling and self.on_unit is not None:
            self.on_unit(done)


def _raise_first(outcomes: Sequence[_Outcome], unit: str = "a tile", what: str = "model call") -> None:
    """Raise the first device failure (in device order) naming its device, else the first interrupt."""
    import comfy.model_management as mm

    interrupt = None
    for outcome in outcomes:
        error = outcome.error
        if error is None:
            continue
        if isinstance(error, mm.InterruptProcessingException):
            interrupt = interrupt or error
            continue
        message = (f"LTX TDP: {unit} of this {what} failed on {outcome.share.device}: "
                   f"{type(error).__name__}: {error}")
        oom = getattr(mm, "OOM_EXCEPTION", None)
        if oom is not None and isinstance(error, oom):
            raise type(error)(message) from error  # ComfyUI's out-of-memory handling still recognises it
        raise DeviceFailure(message) from error
    if interrupt is not None:
        raise interrupt
