"""The transformer options each device's tiles see when TDP spreads a model call over ComfyUI's in-process
MultiGPU devices: another device's options are built in the calling thread and share nothing mutable with the
caller's (ComfyUI's `cast_transformer_options` replaces patch, wrapper and callback entries with their `.to(device)`
copies in place: 0.33 patches and patches_replace, 0.24 wrappers and callbacks too).

HARDWARE MOCK: `fake_devices(n)` makes ComfyUI report cpu, cpu:1 (, cpu:2) (see `ltx_tdp_devkit.core_multigpu`);
the tiny LTXV, core's deepclones, its MultiGPUThreadPool and the pack's dispatch are real.
"""

from __future__ import annotations

import torch

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2
from ltx_tdp_devkit.option_probes import INERT, CallerOptions, CondLists, Movable


def _sample(comfy, model, cfg: float = 1.0) -> torch.Tensor:
    return ksample(comfy, model, {"samples": randn(1, 128, 3, 8, 10, seed=2)}, steps=2, cfg=cfg)


def test_other_devices_options_are_built_here_and_leave_the_callers_untouched(comfy, ltxv):
    import comfy.patcher_extension as ext

    casts: list[str] = []
    caller = CallerOptions()

    def inner(executor, *args, **kwargs):  # after TDP's, on this device: no entry replaced while the call runs
        if executor.class_obj is main:
            caller.check(args[5])
        return executor(*args, **kwargs)

    outside = ltxv.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", caller)
    with fake_devices(2):
        model = tdp_2x2(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", inner)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_movable", Movable(casts))
        model.set_model_patch(Movable(casts), INERT)
        model = cfg_split(model, 2)
        main = model.model
        multi = _sample(comfy, model)
    assert caller.changed == [], f"the caller's patches, wrappers or callbacks were replaced: {caller.changed}"
    assert casts, "no option was cast to the other device"
    assert set(casts) <= caller.threads, (f"another device's options were built in {sorted(set(casts))}, "
                                          f"not in the calling thread {sorted(caller.threads)}")
    single = _sample(comfy, tdp_2x2(ltxv))
    assert torch.equal(multi, single), f"two devices differ from one by {(multi - single).abs().max():.3e}"


def test_a_tile_of_a_cut_cond_batch_sees_its_own_conds_cond_or_uncond_and_uuids(comfy, ltxv):
    """cfg 3 over 3 devices: cond and uncond are cut apart (8 units, batch 1 each). Each tile call's
    `cond_or_uncond` and `uuids` list the conds of its own batch, in batch order, as ComfyUI lists them for a
    batch it runs (patches such as EasyCache or NAG split the batch by them)."""
    import comfy.patcher_extension as ext

    conds = CondLists()
    outside = ltxv.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", conds)
    with fake_devices(3):
        model = tdp_2x2(outside)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", conds.part)
        _sample(comfy, cfg_split(model, 3), cfg=3.0)
    assert len({c for c, _, _ in conds.whole}) == 2, f"the calls were not cond and uncond batched: {conds.whole}"
    assert {batch for batch, _, _, _ in conds.parts} == {1}, "cond and uncond were not cut apart"
    wrong = conds.wrong()
    assert not wrong, (f"{len(wrong)} of {len(conds.parts)} tile calls of batch 1 saw another batch's cond_or_uncond and "
                       f"uuids, e.g. {wrong[0]}")
