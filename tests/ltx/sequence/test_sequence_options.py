"""The transformer options each device sees when LTX Sequence Parallel spreads a model call, as on the tile path
(tests/ltx/model/test_core_multigpu_options.py): another device's options are built in the calling thread and share
nothing mutable with the caller's, and where the conds are cut into groups each device's call lists only its own
conds in `cond_or_uncond` and `uuids` (patches such as EasyCache or NAG split the batch by them).

HARDWARE MOCK: `fake_devices(n)` makes ComfyUI report cpu, cpu:1 (see `ltx_tdp_devkit.core_multigpu`); the tiny
LTXV, core's deepclones, its MultiGPUThreadPool and the pack's dispatch are real.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.option_probes import INERT, CallerOptions, CondLists, Movable
from ltx_tdp_devkit.sequence import BOUND, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")


def _latent() -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=2)}


def test_other_devices_options_are_built_here_and_leave_the_callers_untouched(comfy, ltxv3):
    import comfy.patcher_extension as ext

    casts: list[str] = []
    caller = CallerOptions()

    outside = ltxv3.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", caller)
    with fake_devices(2):
        model = sequence(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_movable", Movable(casts))
        model.set_model_patch(Movable(casts), INERT)
        multi = ksample(comfy, cfg_split(model, 2), _latent(), cfg=1.0)
    assert caller.changed == [], f"the caller's patches, wrappers or callbacks were replaced: {caller.changed}"
    assert casts, "no option was cast to the other device"
    assert set(casts) <= caller.threads, (f"another device's options were built in {sorted(set(casts))}, "
                                          f"not in the calling thread {sorted(caller.threads)}")
    err = relative_error(multi, ksample(comfy, ltxv3, _latent(), cfg=1.0))
    assert err <= BOUND, f"two devices differ from one by {err:.3e} (relative), bound {BOUND}"


def test_each_devices_cond_group_sees_its_own_cond_or_uncond_and_uuids(comfy, ltxv3):
    """cfg 3 on 2 devices of equal speed: one cond per device, whole (no exchange). Each device's call of batch 1
    lists the cond of its own batch row, as ComfyUI lists them for a batch it runs."""
    import comfy.patcher_extension as ext

    conds = CondLists()
    outside = ltxv3.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", conds)
    with fake_devices(2):
        model = sequence(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", conds.part)
        ksample(comfy, cfg_split(model, 2), _latent(), cfg=3.0)
    assert len({c for c, _, _ in conds.whole}) == 2, f"the calls were not cond and uncond batched: {conds.whole}"
    assert {batch for batch, _, _, _ in conds.parts} == {1}, "cond and uncond were not one per device"
    wrong = conds.wrong()
    assert not wrong, (f"{len(wrong)} of {len(conds.parts)} device calls of batch 1 saw another batch's cond_or_uncond and "
                       f"uuids, e.g. {wrong[0]}")
