"""Cancel during TDP over ComfyUI's in-process MultiGPU, taken the way a real prompt takes it: ComfyUI's server
installs a progress hook that calls `throw_exception_if_processing_interrupted` on every progress report (main.py
`hijack_progress`), so the Cancel button's flag raises `InterruptProcessingException` (a BaseException) in the
sampler's thread at its next progress report or tile. The other device's tile in flight must have ended before the
exception leaves TDP's model call: nothing runs on after the prompt, and the next prompt runs.

HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu and cpu:1 (see `ltx_tdp_devkit.core_multigpu`);
the tiny LTXV, core's deepclones, its MultiGPUThreadPool and ComfyUI's interrupt are real.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, pool_threads
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2

SLOW_TILE_S = 1.0
"""How long the other device's first tile takes: it is still running when this device takes the Cancel."""


def _sample(comfy, model) -> torch.Tensor:
    return ksample(comfy, model, {"samples": randn(1, 128, 3, 8, 10, seed=2)}, steps=2, cfg=1.0)


class _Timeline:
    """APPLY_MODEL wrappers recording when each tile ran (inner, after TDP's) and when an exception left TDP's
    model call (outer, before TDP's). This device's first tile presses Cancel once the other device's first tile
    is running; that tile takes SLOW_TILE_S."""

    def __init__(self) -> None:
        self.main: object = None
        self.tiles: list[tuple[bool, float, float]] = []
        self.left: list[float] = []
        self.other_running = threading.Event()
        self.lock = threading.Lock()

    def outer(self, executor, *args, **kwargs):
        try:
            return executor(*args, **kwargs)
        except BaseException:
            self.left.append(time.monotonic())
            raise

    def inner(self, executor, *args, **kwargs):
        import comfy.model_management as mm

        here = executor.class_obj is self.main
        with self.lock:
            first = not any(on_main == here for on_main, _, _ in self.tiles)
            self.tiles.append((here, time.monotonic(), float("inf")))
            index = len(self.tiles) - 1
        if first and not here:
            self.other_running.set()
            time.sleep(SLOW_TILE_S)
        if first and here:
            assert self.other_running.wait(30), "the other device's tile never started"
            mm.interrupt_current_processing(True)  # what the UI's Cancel button sets
        try:
            return executor(*args, **kwargs)
        finally:
            with self.lock:
                self.tiles[index] = (here, self.tiles[index][1], time.monotonic())


def test_cancel_waits_for_every_devices_tile_and_the_next_prompt_runs(comfy, ltxv):
    import comfy.model_management as mm
    import comfy.patcher_extension as ext
    import comfy.utils as comfy_utils

    def server_hook(value, total, preview=None, prompt_id=None, node_id=None):
        mm.throw_exception_if_processing_interrupted()  # as ComfyUI's server hook does on every progress report

    timeline = _Timeline()
    outside = ltxv.clone()
    outside.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_outer", timeline.outer)
    before = comfy_utils.PROGRESS_BAR_HOOK
    comfy_utils.set_progress_bar_global_hook(server_hook)
    try:
        with fake_devices(2):
            model = tdp_2x2(outside)
            model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_inner", timeline.inner)
            model = cfg_split(model, 2)
            timeline.main = model.model
            try:
                with pytest.raises(mm.InterruptProcessingException):
                    _sample(comfy, model)
            finally:
                interrupted = mm.processing_interrupted()
                mm.interrupt_current_processing(False)
            assert not pool_threads(), f"MultiGPU pool threads still running after the Cancel: {pool_threads()}"
            assert not interrupted, "the Cancel was not taken (ComfyUI's flag is still set)"
            assert timeline.left, "the interrupt never left TDP's model call"
            late = [(on_main, end - timeline.left[0]) for on_main, _, end in timeline.tiles if end > timeline.left[0]]
            assert not late, ("tiles still ran after the Cancel left TDP's model call (on this device, seconds "
                              f"after): {late}")
            assert len(timeline.tiles) == 2, f"{len(timeline.tiles)} of 4 tiles ran; one per device may"
            again = _sample(comfy, cfg_split(tdp_2x2(ltxv), 2))
    finally:
        comfy_utils.set_progress_bar_global_hook(before)
    single = _sample(comfy, tdp_2x2(ltxv))
    assert torch.equal(again, single), f"the prompt after the Cancel differs by {(again - single).abs().max():.3e}"
