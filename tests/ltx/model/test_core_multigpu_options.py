"""The transformer options each device's tiles see when TDP spreads a model call over ComfyUI's in-process
MultiGPU devices: another device's options are built in the calling thread and share nothing mutable with the
caller's (ComfyUI's `cast_transformer_options` replaces patch, wrapper and callback entries with their `.to(device)`
copies in place: 0.33 patches and patches_replace, 0.24 wrappers and callbacks too).

HARDWARE MOCK: `fake_devices(n)` makes ComfyUI report cpu, cpu:1 (, cpu:2) (see `ltx_tdp_devkit.core_multigpu`);
the tiny LTXV, core's deepclones, its MultiGPUThreadPool and the pack's dispatch are real.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import SKIP_REASON, cfg_split, fake_devices, has_core_multigpu, torch_threads
from ltx_tdp_devkit.ltx_helpers import ksample, load_ltxv, randn, tdp_2x2

INERT = "tdp_test_inert"
"""A transformer_options["patches"] name no model reads: the patch there is only cast to each device."""


@pytest.fixture(scope="module")
def ltxv(comfy, model_names):
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    return load_ltxv(comfy, model_names)


@pytest.fixture(autouse=True)
def one_torch_thread():
    with torch_threads(1):
        yield


def _sample(comfy, model, cfg: float = 1.0) -> torch.Tensor:
    return ksample(comfy, model, {"samples": randn(1, 128, 3, 8, 10, seed=2)}, steps=2, cfg=cfg)


class _Movable:
    """A patch or wrapper with `.to`, as ComfyUI's casts call it: records the thread, returns a moved copy."""

    def __init__(self, casts: list[str], device: Any = None):
        self.casts, self.device = casts, device

    def to(self, device: Any) -> "_Movable":
        self.casts.append(threading.current_thread().name)
        return type(self)(self.casts, device)

    def __call__(self, executor, *args, **kwargs):  # as an APPLY_MODEL wrapper: passes the call on
        return executor(*args, **kwargs)


def _shape(options: dict[str, Any]) -> dict[str, Any]:
    """The identities of the caller's patch, wrapper and callback containers and of every entry in them."""
    def ids(value: Any) -> Any:
        if isinstance(value, dict):
            return (id(value), {k: ids(v) for k, v in value.items()})
        if isinstance(value, list):
            return (id(value), [ids(v) for v in value])
        return id(value)

    return {key: ids(options.get(key)) for key in ("patches", "patches_replace", "wrappers", "callbacks")}


def test_other_devices_options_are_built_here_and_leave_the_callers_untouched(comfy, ltxv):
    import comfy.patcher_extension as ext

    casts: list[str] = []
    seen: dict[str, Any] = {"threads": set(), "changed": []}

    def outer(executor, *args, **kwargs):  # before TDP's wrapper: the caller's transformer_options, whole call
        options = args[5]
        seen["threads"].add(threading.current_thread().name)
        seen["call"] = _shape(options)
        out = executor(*args, **kwargs)
        if _shape(options) != seen["call"]:
            seen["changed"].append(f"after the call: {seen['call']} -> {_shape(options)}")
        return out

    def inner(executor, *args, **kwargs):  # after TDP's, on this device: no entry replaced while the call runs
        if executor.class_obj is main and _shape(args[5]) != seen["call"]:
            seen["changed"].append("during the call")
        return executor(*args, **kwargs)

    outside = ltxv.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", outer)
    with fake_devices(2):
        model = tdp_2x2(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", inner)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_movable", _Movable(casts))
        model.set_model_patch(_Movable(casts), INERT)
        model = cfg_split(model, 2)
        main = model.model
        multi = _sample(comfy, model)
    assert seen["changed"] == [], f"the caller's patches, wrappers or callbacks were replaced: {seen['changed']}"
    assert casts, "no option was cast to the other device"
    assert set(casts) <= seen["threads"], (f"another device's options were built in {sorted(set(casts))}, "
                                           f"not in the calling thread {sorted(seen['threads'])}")
    single = _sample(comfy, tdp_2x2(ltxv))
    assert torch.equal(multi, single), f"two devices differ from one by {(multi - single).abs().max():.3e}"
