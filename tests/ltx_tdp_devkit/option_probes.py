"""Probes of the transformer options a device's model calls see (the tile path's and the sequence path's tests).

ComfyUI's `cast_transformer_options` replaces patch, wrapper and callback entries with their `.to(device)` copies
in place, so a device's options must be copies built before any device runs: `Movable` records where each cast ran
and `shape` the identities of the caller's containers and their entries, to compare before, during and after."""

from __future__ import annotations

import threading
from typing import Any

INERT = "tdp_test_inert"
"""A transformer_options["patches"] name no model reads: the patch there is only cast to each device."""


class Movable:
    """A patch or wrapper with `.to`, as ComfyUI's casts call it: records the thread, returns a moved copy."""

    def __init__(self, casts: list[str], device: Any = None):
        self.casts, self.device = casts, device

    def to(self, device: Any) -> "Movable":
        self.casts.append(threading.current_thread().name)
        return type(self)(self.casts, device)

    def __call__(self, executor, *args, **kwargs):  # as an APPLY_MODEL wrapper: passes the call on
        return executor(*args, **kwargs)


def shape(options: dict[str, Any]) -> dict[str, Any]:
    """The identities of the caller's patch, wrapper and callback containers and of every entry in them."""
    def ids(value: Any) -> Any:
        if isinstance(value, dict):
            return (id(value), {k: ids(v) for k, v in value.items()})
        if isinstance(value, list):
            return (id(value), [ids(v) for v in value])
        return id(value)

    return {key: ids(options.get(key)) for key in ("patches", "patches_replace", "wrappers", "callbacks")}


def context_rows(args: tuple) -> list[float]:
    """One number per cond of an APPLY_MODEL call's batch: its text context row's sum (args[3])."""
    return [float(row.double().sum()) for row in args[3]]


class CallerOptions:
    """An APPLY_MODEL wrapper put before the pack's (on the model the pack's node gets): records the threads the
    whole calls come in on, and in `changed` every time the caller's patch, wrapper or callback containers or their
    entries were replaced by the end of a call. `check(args)`, from a wrapper after the pack's, records a
    replacement while the call runs."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.changed: list[str] = []
        self.call: dict[str, Any] | None = None

    def __call__(self, executor, *args, **kwargs):
        options = args[5]
        self.threads.add(threading.current_thread().name)
        self.call = shape(options)
        out = executor(*args, **kwargs)
        if shape(options) != self.call:
            self.changed.append(f"after the call: {self.call} -> {shape(options)}")
        return out

    def check(self, options: dict[str, Any]) -> None:
        if shape(options) != self.call:
            self.changed.append("during the call")


class CondLists:
    """Records a step's conds as ComfyUI batched them (`whole`, a wrapper before the pack's) and each part of the
    call the pack runs (`part`, a wrapper after the pack's: its batch, `cond_or_uncond`, `uuids`, text rows)."""

    def __init__(self) -> None:
        self.whole: list[tuple[int, Any, float]] = []
        self.parts: list[tuple[int, list, list, list[float]]] = []
        self._lock = threading.Lock()

    def __call__(self, executor, *args, **kwargs):  # the whole call
        options = args[5]
        self.whole.extend(zip(options["cond_or_uncond"], options["uuids"], context_rows(args)))
        return executor(*args, **kwargs)

    def part(self, executor, *args, **kwargs):
        options = args[5]
        with self._lock:
            self.parts.append((int(args[0].shape[0]), list(options["cond_or_uncond"]), list(options["uuids"]),
                               context_rows(args)))
        return executor(*args, **kwargs)

    def wrong(self) -> list[tuple[list, list[str], list[float]]]:
        """The parts of batch 1 whose lists do not name exactly the cond of their own text row."""
        return [(cou, [str(u) for u in uuids], context) for _, cou, uuids, context in self.parts
                if not (len(cou) == len(uuids) == len(context) == 1 and (cou[0], uuids[0], context[0]) in self.whole)]
