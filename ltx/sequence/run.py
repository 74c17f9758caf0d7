"""One model call spread over the devices of ComfyUI's MultiGPU clones, sequence-parallel.

The call's work units are (cond group x shard): with equal speeds and a batch of conds that divides evenly over
both, the devices form one group per share of the conds (each group: that slice of the batch, no exchange between
groups; a group of one device runs its slice whole, as core's cond split does); otherwise every device is one
shard of the whole batch. The units run through the tile path's `DeviceRanks` (this device in the calling thread,
every other device in core's thread pool, concurrently; the stop flag; failures named by device). Every rank of
a group ends with the group's whole output (the last block gathers it); only the group's rank 0 hands it on, in the
output's dtype: the output itself where there is one group, else a call-sized buffer holding the group's rows and
zeros elsewhere, so the sum is exactly the groups' outputs side by side. No other buffer is added on any device.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from ..device_ranks import DeviceRanks, DeviceShare
from ..model.devices import DEVICES_KEY, ModelDevices, device_options
from ..model.units import CallInputs, slice_options
from ..progress import check_interrupt
from .attention import GatherAttention
from .blocks import ShardBlock
from .context import ShardContext
from .exchange import AllGather

log = logging.getLogger(__name__)

CONTEXT_KEY = "ltx_tdp_sequence"
"""transformer_options key holding a rank's ShardContext during a sharded call (for hooks that want to know)."""


def cond_groups(conds: int, batch: int, speeds: Sequence[float]) -> int:
    """How many device groups share a call's `conds` conds: the largest k dividing both the conds and the device
    count where every device has the same speed (fewer bytes exchanged, the same work per device); else 1."""
    if conds <= 1 or batch % conds or len(set(speeds)) != 1:
        return 1
    return max(k for k in range(1, conds + 1) if conds % k == 0 and len(speeds) % k == 0)


def sharded_options(options: dict[str, Any], context: ShardContext, blocks: int) -> dict[str, Any]:
    """`options` (one device's transformer options, a copy) with the block and attention hooks of `context`."""
    out = dict(options)
    replace = dict(out.get("patches_replace") or {})
    dit = dict(replace.get("dit") or {})
    for i in range(blocks):
        dit[("double_block", i)] = ShardBlock(i, blocks - 1, context, dit.get(("double_block", i)))
    replace["dit"] = dit
    out["patches_replace"] = replace
    out["optimized_attention_override"] = GatherAttention(context, out.get("optimized_attention_override"))
    out[CONTEXT_KEY] = context
    return out


def block_count(model: Any) -> int:
    """The number of transformer blocks of a ComfyUI BaseModel's LTX diffusion model."""
    return len(model.diffusion_model.transformer_blocks)


class SequenceCall:
    """One model call as work units: unit u = rank u % size of group u // size, run on device u."""

    def __init__(self, devices: ModelDevices, executor: Any, inputs: CallInputs, control: Any,
                 transformer_options: dict[str, Any]):
        self.devices = devices
        self.executor = executor
        self.inputs = inputs
        self.control = control
        self.options = transformer_options
        conds = len(transformer_options.get("cond_or_uncond") or ()) or 1
        self.groups = cond_groups(conds, inputs.batch, devices.speeds)
        self.size = len(devices.devices) // self.groups
        self.parts = inputs.slices(self.groups)
        self.exchanges = [AllGather(self.size) for _ in range(self.groups)]
        self.blocks = block_count(devices.models[devices.devices[0]])
        self.dtype: torch.dtype | None = None
        self.device_options: dict[torch.device, dict[str, Any]] = {}
        """Each other device's transformer options, built in the calling thread before any device runs (ComfyUI's
        cast replaces patch, wrapper and callback entries in place: here only in copies that share nothing)."""

    def describe(self) -> str:
        where = ", ".join(f"{d} (speed {s:g})" for d, s in zip(self.devices.devices, self.devices.speeds))
        if self.size == 1:
            return f"{self.groups} cond slices, one per device, each whole (no exchange): {where}"
        groups = f" in {self.groups} groups, each on its slice of the conds" if self.groups > 1 else ""
        return f"the video tokens in {self.size} shards by speed{groups}: {where}"

    def partial_on(self, device: torch.device):
        """What `device` runs (called in its thread): its unit on its clone, through the rest of the wrapper chain."""
        import comfy.patcher_extension as ext

        try:
            model = self.devices.models[device]
            inner = getattr(model, self.executor.original.__name__)
            options = self.device_options[device]
        except BaseException:
            self.abort()  # the other devices may already wait in an exchange
            raise

        def run(inputs: CallInputs, opts: dict[str, Any]) -> torch.Tensor:
            chain = ext.WrapperExecutor.new_class_executor(inner, model, self.executor.wrappers, self.executor.idx + 1)
            return chain.execute(inputs.x, inputs.t, None, inputs.c_crossattn, self.control, opts, **inputs.kwargs)

        return self._partial(device, options, run, move=True)

    def abort(self) -> None:
        """Release every device waiting in an exchange of this call (they stop, counted as stopped)."""
        for exchange in self.exchanges:
            exchange.abort()

    def own_partial(self):
        device = self.devices.devices[0]
        options = {k: v for k, v in self.options.items() if k != DEVICES_KEY}

        def run(inputs: CallInputs, opts: dict[str, Any]) -> torch.Tensor:
            return self.executor(inputs.x, inputs.t, None, inputs.c_crossattn, self.control, opts, **inputs.kwargs)

        return self._partial(device, options, run, move=False)

    def _partial(self, device: torch.device, options: dict[str, Any], run: Any, move: bool):
        per_group = slice_options(options, self.groups)  # each group's cond_or_uncond and uuids are its conds'

        def partial(unit: int, units: int, before: Any) -> torch.Tensor | None:
            group, rank = divmod(unit, self.size)
            try:
                part = self.parts[group].to(device) if move else self.parts[group]
                opts = per_group[group]
                if before is not None:
                    before(None)
                if self.size > 1:
                    stop = (lambda: before(None)) if before is not None else check_interrupt
                    context = ShardContext(rank, self._group_speeds(group), self.exchanges[group], stop)
                    opts = sharded_options(opts, context, self.blocks)
                out = run(part, opts)
            except BaseException:
                self.abort()
                raise
            if self.size > 1:  # a shard that skipped the blocks releases the others with an error naming why
                self.exchanges[group].leave(rank)
            if unit == 0:
                self.dtype = out.dtype
            if rank:
                return None  # every rank of a group holds the group's whole output: its rank 0 hands it on
            if self.groups == 1:
                return out.reshape(-1)
            flat = out.new_zeros(self.inputs.x.numel())  # this group's rows, zeros elsewhere: the sum is exact
            flat[group * out.numel():(group + 1) * out.numel()] = out.reshape(-1)
            return flat

        return partial

    def _group_speeds(self, group: int) -> tuple[float, ...]:
        return self.devices.speeds[group * self.size:(group + 1) * self.size]

    def run(self) -> torch.Tensor:
        """The call's output, on this device, as one device computes it (within fp32 rounding)."""
        devices = self.devices.devices
        self.device_options = {d: device_options(self.options, d) for d in devices[1:]}
        ranks = DeviceRanks([DeviceShare(d, range(u, u + 1)) for u, d in enumerate(devices)], self.devices.pool,
                            unit="a video shard" if self.size > 1 else "a cond slice")
        flat = ranks.reduce(self, self.own_partial())
        check_interrupt()
        return flat.to(self.dtype or torch.float32).view(self.inputs.x.shape)
