"""TDP over ComfyUI's own in-process MultiGPU (MultiGPU CFG Split): every model call's tiles are work units spread
over the devices of core's deepclones, in this process, and the result is one device's.

HARDWARE MOCK: this CPU machine has one torch device, so `ltx_tdp_devkit.core_multigpu.fake_devices` makes
`comfy.model_management.get_all_torch_devices` report cpu, cpu:1 (, cpu:2). Everything else is real: the tiny
LTXV loaded by UNETLoader, the deepclones MultiGPU CFG Split builds through the loader's factory
(`create_multigpu_deepclones`, see `core_multigpu.cfg_split`), the guider's
MultiGPUThreadPool (one thread per device), the pack's dispatch and scheduling. One torch thread per device,
as on this 2-core machine. The tile calls are counted by an APPLY_MODEL wrapper inside TDP's (`TileCalls`).

Skipped where ComfyUI has no comfy/multigpu.py (0.3.75).
"""

from __future__ import annotations

import threading

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import TileCalls, cfg_split, fake_devices, pool_threads
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.ltx_helpers import ksample, patch, randn, tdp_2x2, tiling

STEPS = 2
"""KSampler euler steps: one batched model call per step."""


def _latent(seed: int = 2, h: int = 8, w: int = 10) -> dict:
    return {"samples": randn(1, 128, 3, h, w, seed=seed)}


def _sample(comfy, model, cfg: float, **kw) -> torch.Tensor:
    return ksample(comfy, model, kw.pop("latent", None) or _latent(), steps=STEPS, cfg=cfg, **kw)


@pytest.mark.parametrize("cfg", [1.0, 3.0])
@pytest.mark.parametrize("placement", ["split_before_tdp", "split_after_tdp"])
def test_two_devices_run_the_tiles_and_equal_one_device_bit_for_bit(comfy, ltxv, placement, cfg):
    single = _sample(comfy, tdp_2x2(ltxv), cfg)
    calls = TileCalls()
    with fake_devices(2):
        if placement == "split_before_tdp":
            model = calls.on(tdp_2x2(cfg_split(ltxv, 2)))
        else:
            model = cfg_split(calls.on(tdp_2x2(ltxv)), 2)
        multi = _sample(comfy, model, cfg)
    assert torch.equal(multi, single), f"{placement}, cfg {cfg}: differs by {(multi - single).abs().max():.3e}"
    on_main, elsewhere = calls.per_model(model.model)
    assert (on_main, elsewhere) == (2 * STEPS, 2 * STEPS), (
        f"{placement}, cfg {cfg}: 4 tiles a call over 2 devices ran {on_main} tile calls here and {elsewhere} on the "
        f"clone in {STEPS} steps, expected {2 * STEPS} each")
    want_batch = 1 if cfg == 1.0 else 2
    assert calls.batches() == {want_batch}, f"cfg {cfg}: tile calls had batches {calls.batches()}, expected the " \
                                            f"whole cond batch ({want_batch}): 4 tiles fill 2 devices evenly"


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_three_devices_equal_one_device(comfy, ltxv, cfg):
    """cfg 1: 4 tiles over 3 devices (2, 1, 1 a call), bit for bit. cfg 3: 8 units (cond and uncond apart) finish
    sooner (3, 3, 2 half-size units a call), so each tile call has batch 1 where one device runs batch 2; the
    matrix products of another batch size round differently, so the result matches within fp32 rounding."""
    single = _sample(comfy, tdp_2x2(ltxv), cfg)
    calls = TileCalls()
    with fake_devices(3):
        multi = _sample(comfy, cfg_split(calls.on(tdp_2x2(ltxv)), 3), cfg)
    err = (multi - single).abs().max().item()
    if cfg == 1.0:
        assert torch.equal(multi, single), f"cfg 1 over 3 devices differs from one device by {err:.3e}"
        assert calls.counts() == [2 * STEPS, STEPS, STEPS], f"tile calls per device: {calls.counts()}"
    else:
        assert err <= 1e-5, f"cfg 3 over 3 devices differs from one device by {err:.3e} (limit 1e-5)"
        assert calls.counts() == [3 * STEPS, 3 * STEPS, 2 * STEPS], f"tile calls per device: {calls.counts()}"
        assert calls.batches() == {1}, f"cfg 3 over 3 devices: tile calls had batches {calls.batches()}, expected 1"


def test_relative_speeds_set_each_devices_share(comfy, ltxv):
    """cpu:1 three times as fast (MultiGPU Options): of 4 tiles a call it runs 3, this device 1."""
    single = _sample(comfy, tdp_2x2(ltxv), 1.0)
    calls = TileCalls()
    with fake_devices(2):
        model = cfg_split(calls.on(tdp_2x2(ltxv)), 2, speeds={1: 3.0})
        multi = _sample(comfy, model, 1.0)
    assert torch.equal(multi, single), f"speeds 1:3 differ from one device by {(multi - single).abs().max():.3e}"
    on_main, elsewhere = calls.per_model(model.model)
    assert (on_main, elsewhere) == (STEPS, 3 * STEPS), f"speeds 1:3: {on_main} tile calls here, {elsewhere} on cpu:1"


def test_one_by_one_tiling_equals_the_unpatched_model(comfy, ltxv):
    """cfg 1: one unit, the unpatched model's call, bit for bit. cfg 3: cond and uncond on one device each, the
    split ComfyUI's own MultiGPU makes of the unpatched model, bit for bit."""
    one_tile = patch(ltxv, tiling())
    with fake_devices(2):
        for cfg, unpatched in ((1.0, _sample(comfy, ltxv, 1.0)), (3.0, _sample(comfy, cfg_split(ltxv, 2), 3.0))):
            calls = TileCalls()
            got = _sample(comfy, cfg_split(calls.on(one_tile), 2), cfg)
            assert torch.equal(got, unpatched), f"1 x 1, cfg {cfg}: differs by {(got - unpatched).abs().max():.3e}"
            expected = [STEPS] if cfg == 1.0 else [STEPS, STEPS]
            assert calls.counts() == expected, f"1 x 1, cfg {cfg}: tile calls per device {calls.counts()}"


def test_the_progress_bar_counts_every_devices_tiles(comfy, ltxv):
    import comfy.utils as comfy_utils

    seen: list[tuple[int, int]] = []
    before = comfy_utils.PROGRESS_BAR_HOOK
    comfy_utils.set_progress_bar_global_hook(lambda value, total, preview=None, node_id=None: seen.append((value, total)))
    try:
        with fake_devices(2):
            _sample(comfy, cfg_split(tdp_2x2(ltxv), 2), 1.0)
    finally:
        comfy_utils.set_progress_bar_global_hook(before)
    tiles = [value for value, total in seen if total == 4 * STEPS]
    assert tiles and tiles[-1] == 4 * STEPS, f"the tile bar (4 tiles x {STEPS} steps) reported {tiles}"
    assert tiles == sorted(tiles), f"the tile bar went backwards: {tiles}"


def test_a_failing_device_is_named_nothing_keeps_running_and_the_next_run_works(comfy, ltxv):
    import comfy.patcher_extension as ext
    from ltx_tdp.ltx.device_ranks import DeviceFailure

    def fail_on_the_clone(executor, *args, **kwargs):
        if executor.class_obj is not main:
            raise RuntimeError("simulated fault on this device")
        return executor(*args, **kwargs)

    with fake_devices(2):
        failing = cfg_split(tdp_2x2(ltxv), 2)
        main = failing.model
        failing.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_fault", fail_on_the_clone)
        with pytest.raises(DeviceFailure, match=r"failed on cpu:1: RuntimeError: simulated fault on this device"):
            _sample(comfy, failing, 1.0)
        assert not pool_threads(), f"MultiGPU pool threads still running after the failure: {pool_threads()}"
        again = _sample(comfy, cfg_split(tdp_2x2(ltxv), 2), 1.0)
    single = _sample(comfy, tdp_2x2(ltxv), 1.0)
    assert torch.equal(again, single), f"the run after the failure differs by {(again - single).abs().max():.3e}"


def test_an_interrupt_stops_every_device_at_its_next_tile(comfy, ltxv):
    """16 tiles a call, 8 per device: the tile that presses Cancel and the other device's tile in flight run."""
    import comfy.model_management as mm

    calls = TileCalls()
    pressed, lock = [], threading.Lock()

    def press_cancel(executor, *args, **kwargs):
        with lock:  # once, in the first tile call on either device
            first = not pressed
            pressed.append(True)
        if first:
            mm.interrupt_current_processing(True)  # what the UI's Cancel button sets
        return executor(*args, **kwargs)

    import comfy.patcher_extension as ext

    with fake_devices(2):
        model = cfg_split(calls.on(patch(ltxv, tiling(height=(4, 1), width=(4, 1)))), 2)
        model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_cancel", press_cancel)
        try:
            with pytest.raises(mm.InterruptProcessingException):
                _sample(comfy, model, 1.0, latent=_latent(h=12, w=12))
        finally:
            interrupted = mm.processing_interrupted()
            mm.interrupt_current_processing(False)
        assert not pool_threads(), f"MultiGPU pool threads still running after the interrupt: {pool_threads()}"
    assert not interrupted, "the interrupt was not taken (ComfyUI's flag is still set)"
    assert len(calls.calls) <= 2, f"{len(calls.calls)} of 16 tile calls ran; at most 2 (one per device) may"


def test_a_worker_group_together_with_multigpu_clones_is_refused_naming_the_fix(comfy, ltxv):
    """A TileRanks other than ONE_RANK stands for a launcher group here (whose ranks are worker processes)."""
    import comfy.patcher_extension as ext
    from ltx_tdp.ltx.model.patch import WRAPPER_KEY, TDPModelWrapper
    from ltx_tdp.tiling import TilingError
    from ltx_tdp.tiling.ranks import OneRank

    with fake_devices(2):
        model = cfg_split(tdp_2x2(ltxv), 2)
        own = model.wrappers[ext.WrappersMP.APPLY_MODEL][WRAPPER_KEY][0]
        model.wrappers[ext.WrappersMP.APPLY_MODEL][WRAPPER_KEY] = [
            TDPModelWrapper(own.settings, own.geometry, OneRank(), own.positions)]
        with pytest.raises(TilingError, match="remove MultiGPU CFG Split, or disconnect the launcher's tdp_group"):
            _sample(comfy, model, 1.0)
