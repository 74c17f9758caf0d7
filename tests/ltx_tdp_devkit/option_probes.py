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
