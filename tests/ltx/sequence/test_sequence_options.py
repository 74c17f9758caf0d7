"""The transformer options each device sees when LTX Sequence Parallel spreads a model call, as on the tile path
(tests/ltx/model/test_core_multigpu_options.py): another device's options are built in the calling thread and share
nothing mutable with the caller's, and where the conds are cut into groups each device's call lists only its own
conds in `cond_or_uncond` and `uuids` (patches such as EasyCache or NAG split the batch by them).

HARDWARE MOCK: `fake_devices(n)` makes ComfyUI report cpu, cpu:1 (see `ltx_tdp_devkit.core_multigpu`); the tiny
LTXV, core's deepclones, its MultiGPUThreadPool and the pack's dispatch are real.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.option_probes import INERT, Movable, context_rows, shape
from ltx_tdp_devkit.sequence import BOUND, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")


def _latent() -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=2)}


def test_other_devices_options_are_built_here_and_leave_the_callers_untouched(comfy, ltxv3):
    import comfy.patcher_extension as ext

    casts: list[str] = []
    seen: dict[str, Any] = {"threads": set(), "changed": []}

    def outer(executor, *args, **kwargs):  # before the node's wrapper: the caller's options, whole call
        options = args[5]
        seen["threads"].add(threading.current_thread().name)
        seen["call"] = shape(options)
        out = executor(*args, **kwargs)
        if shape(options) != seen["call"]:
            seen["changed"].append(f"after the call: {seen['call']} -> {shape(options)}")
        return out

    outside = ltxv3.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", outer)
    with fake_devices(2):
        model = sequence(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_movable", Movable(casts))
        model.set_model_patch(Movable(casts), INERT)
        multi = ksample(comfy, cfg_split(model, 2), _latent(), cfg=1.0)
    assert seen["changed"] == [], f"the caller's patches, wrappers or callbacks were replaced: {seen['changed']}"
    assert casts, "no option was cast to the other device"
    assert set(casts) <= seen["threads"], (f"another device's options were built in {sorted(set(casts))}, "
                                           f"not in the calling thread {sorted(seen['threads'])}")
    err = relative_error(multi, ksample(comfy, ltxv3, _latent(), cfg=1.0))
    assert err <= BOUND, f"two devices differ from one by {err:.3e} (relative), bound {BOUND}"


def test_each_devices_cond_group_sees_its_own_cond_or_uncond_and_uuids(comfy, ltxv3):
    """cfg 3 on 2 devices of equal speed: one cond per device, whole (no exchange). Each device's call of batch 1
    lists the cond of its own batch row, as ComfyUI lists them for a batch it runs."""
    import comfy.patcher_extension as ext

    whole: list[tuple[int, Any, float]] = []
    parts: list[tuple[int, list, list, list[float]]] = []
    lock = threading.Lock()

    def outer(executor, *args, **kwargs):  # before the node's wrapper: the whole call as ComfyUI batched it
        options = args[5]
        whole.extend(zip(options["cond_or_uncond"], options["uuids"], context_rows(args)))
        return executor(*args, **kwargs)

    def inner(executor, *args, **kwargs):  # after the node's wrapper: one device's part of the call
        options = args[5]
        with lock:
            parts.append((int(args[0].shape[0]), list(options["cond_or_uncond"]), list(options["uuids"]),
                           context_rows(args)))
        return executor(*args, **kwargs)

    outside = ltxv3.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", outer)
    with fake_devices(2):
        model = sequence(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", inner)
        ksample(comfy, cfg_split(model, 2), _latent(), cfg=3.0)
    assert len({c for c, _, _ in whole}) == 2, f"the calls were not cond and uncond batched: {whole}"
    assert {batch for batch, _, _, _ in parts} == {1}, "cond and uncond were not one per device"
    wrong = [(cou, [str(u) for u in uuids], context) for _, cou, uuids, context in parts
             if not (len(cou) == len(uuids) == len(context) == 1 and (cou[0], uuids[0], context[0]) in whole)]
    assert not wrong, (f"{len(wrong)} of {len(parts)} device calls of batch 1 saw another batch's cond_or_uncond and "
                       f"uuids, e.g. {wrong[0]}")
