"""One LTX model call as work units for several devices: (cond slice x tile), each a `TiledModelCall` tile.

ComfyUI batches the conds of a step into one model call: at cfg > 1 cond and uncond, listed in
`transformer_options["cond_or_uncond"]`, each an equal slice of the batch. `CallInputs.slices(n)` cuts the call
into n such slices, every batched input alike: a tensor input whose first axis is the batch (x, t, the text
context, attention and denoise masks, `keyframe_idxs`) is cut, `latent_shapes` takes the slice's batch, and
constants (frame rate, `guide_attention_entries`, `generated_keyframes`, `ref_audio`) stay whole.
`slice_options` cuts the transformer options' per-cond lists (`cond_or_uncond`, `uuids`) the same way, so a
slice's tiles see the conds of their own batch, as ComfyUI lists them for any batch it runs.

`UnitCall` holds one `TiledModelCall` per slice; unit u is tile u % T of slice u // T (T tiles). Its partial sum
is a flat float64 buffer, the slices' buffers one after another, so the sum over units is every slice's blend
and `finish` joins the slices' outputs back into the call's batch. A device sums its units into one such buffer
(`UnitCall.running`): one full-frame accumulator per device, counted in `ltx.model.memory`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import LatentGeometry, TilingError, exact_sum_dtype
from ...tiling.ranks import BeforeTile, Partial
from .call import ModelCall, TDPSettings, TiledModelCall


def to_device(value: Any, device: torch.device) -> Any:
    """`value` with every tensor in it (also inside dicts, lists and tuples) on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


@dataclass(frozen=True)
class CallInputs:
    """A model call's inputs as the APPLY_MODEL wrapper receives them (ControlNet and concat inputs excluded)."""

    x: torch.Tensor
    t: torch.Tensor
    c_crossattn: Any
    kwargs: dict[str, Any]

    @property
    def batch(self) -> int:
        return int(self.x.shape[0])

    def to(self, device: torch.device) -> "CallInputs":
        return CallInputs(self.x.to(device), self.t.to(device), to_device(self.c_crossattn, device),
                          to_device(self.kwargs, device))

    def slices(self, n: int) -> list["CallInputs"]:
        """The call cut into `n` equal batch slices (n == 1: the call itself)."""
        if n == 1:
            return [self]
        if self.batch % n:
            raise TilingError(f"a model call of batch {self.batch} cannot be cut into {n} equal cond slices")
        size = self.batch // n

        def cut(value: Any, i: int) -> Any:
            if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == self.batch:
                return value[i * size:(i + 1) * size]
            return value

        out = []
        for i in range(n):
            kwargs = {k: cut(v, i) for k, v in self.kwargs.items()}
            if kwargs.get("latent_shapes") is not None:
                kwargs["latent_shapes"] = [(size, *tuple(s)[1:]) for s in kwargs["latent_shapes"]]
            out.append(CallInputs(cut(self.x, i), cut(self.t, i), cut(self.c_crossattn, i), kwargs))
        return out


PER_COND_OPTIONS = ("cond_or_uncond", "uuids")
"""transformer_options lists with one entry per cond of the batch, in batch order (ComfyUI's calc_cond_batch)."""


def slice_options(transformer_options: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The transformer options of each of `n` equal batch slices (`CallInputs.slices`): slice i's
    `cond_or_uncond` and `uuids` are the entries of its conds; every other option is the call's own."""
    if n == 1:
        return [transformer_options]
    out = []
    for i in range(n):
        options = dict(transformer_options)
        for key in PER_COND_OPTIONS:
            value = transformer_options.get(key)
            if isinstance(value, (list, tuple)) and len(value) % n == 0:
                size = len(value) // n
                options[key] = type(value)(value[i * size:(i + 1) * size])
        out.append(options)
    return out


SliceCall = Callable[[int, CallInputs], ModelCall]
"""run(i, slice i) -> the ModelCall that evaluates one tile of that slice (x_tile, kwargs) -> x0 of the tile."""


class UnitCall:
    """A model call cut into `slices` batch slices x its tiles; unit u = tile u % tiles of slice u // tiles."""

    def __init__(self, settings: TDPSettings, geometry: LatentGeometry, inputs: CallInputs, slices: int = 1,
                 sum_dtype: torch.dtype | None = None):
        self.inputs = inputs
        self.parts = inputs.slices(slices)
        dtype = sum_dtype or exact_sum_dtype(inputs.x.device)
        self.calls = [TiledModelCall(settings, geometry, p.x, p.kwargs, dtype) for p in self.parts]
        self.tiles = len(self.calls[0].tiles)
        self.units = self.tiles * len(self.calls)
        self.offsets = [0]
        for call in self.calls:
            self.offsets.append(self.offsets[-1] + call.buffer_numel())

    @property
    def sum_dtype(self) -> torch.dtype:
        return self.calls[0].sum_dtype

    def partial(self, run: SliceCall, unit: int, units: int, before_tile: BeforeTile = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """The window-weighted sum of unit `unit` (of `units`, which must be this call's) as one flat buffer; with
        `out` (such a buffer) that sum is added into `out`, which is returned."""
        if units != self.units:
            raise ValueError(f"this call has {self.units} work units, not {units}")
        part, tile = divmod(unit, self.tiles)
        flat = out
        if flat is None:
            flat = torch.zeros(self.offsets[-1], dtype=self.sum_dtype, device=self.inputs.x.device)
        own = flat[self.offsets[part]:self.offsets[part + 1]]
        self.calls[part].partial(run(part, self.parts[part]), tile, self.tiles, before_tile=before_tile, out=own)
        return flat

    def running(self, run: SliceCall) -> Partial:
        """A Partial for one device: each unit it runs is added, in place, into one flat buffer (made at its first
        unit) and that buffer, the device's running total, is returned every time (`DeviceRanks` does not add it
        to itself). The same bits as separate buffers: float64 sums of fp32 products do not depend on order."""
        total: list[torch.Tensor] = []

        def partial(unit: int, units: int, before_tile: BeforeTile = None) -> torch.Tensor:
            flat = self.partial(run, unit, units, before_tile, out=total[0] if total else None)
            total[:1] = [flat]
            return flat

        return partial

    def finish(self, flat: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The call's output from the sum over all units: each slice's blended x0, joined along the batch."""
        outs = [call.finish(flat[a:b], dtype) for call, a, b in zip(self.calls, self.offsets, self.offsets[1:])]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
