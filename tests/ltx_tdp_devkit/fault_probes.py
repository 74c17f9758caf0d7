"""Helpers of the multi-GPU fault tests: a hook that acts when rank 0 starts its n-th tile call, and the latent
the fault tests sample (the 2 x 2 TDP model is ltx_helpers.tdp_2x2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ltx_helpers import randn

PROBE_KEY = "tdp_test_fault_probe"


def on_rank0_tile(model: Any, n: int, action: Callable[[], None]) -> Any:
    """Run `action()` when rank 0 starts its n-th tile call (an APPLY_MODEL wrapper inside TDP's)."""
    import comfy.patcher_extension as ext

    count = [0]

    def wrapper(executor, *args, **kw):
        count[0] += 1
        if count[0] == n:
            action()
        return executor(*args, **kw)

    model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, PROBE_KEY, wrapper)
    return model


def fault_latent(seed: int = 5) -> dict:
    return {"samples": randn(1, 128, 2, 8, 8, seed=seed)}
