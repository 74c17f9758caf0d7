"""Faults of LTX Sequence Parallel as on the tile path: a device that fails mid-call names itself, Cancel stops
every device, no MultiGPU pool thread outlives the sampling run, and the next run works.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(2)` makes this CPU machine report cpu and cpu:1 to
ComfyUI; the tiny 3-block LTXV, core's deepclones, its thread pool and the pack's dispatch are real. The fault
and the Cancel happen inside a transformer block (a block replace set on the model before the node), so the other
device is waiting in the key/value exchange when they happen.
"""

from __future__ import annotations

import threading

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, pool_threads
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.sequence import BOUND, LTXV_LAYERS, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")

LAYERS = LTXV_LAYERS


def _latent() -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=2)}


class AtBlock:
    """("double_block", i) replaces that call `action(device)` in block `index` (device: the rank's
    `multigpu_thread_device`, None on the calling device), then run the block; `blocks` counts the blocks run."""

    def __init__(self, index: int, action):
        self.index, self.action = index, action
        self.blocks = 0
        self.lock = threading.Lock()

    def hook(self, i: int):
        def replace(args, extra):
            with self.lock:
                self.blocks += 1
            if i == self.index:
                self.action(args["transformer_options"].get("multigpu_thread_device"))
            return extra["original_block"](args)

        return replace

    def on(self, model):
        m = model.clone()
        for i in range(LAYERS):
            m.set_model_patch_replace(self.hook(i), "dit", "double_block", i)
        return m


def test_a_failing_device_is_named_nothing_keeps_running_and_the_next_run_works(comfy, ltxv3):
    from ltx_tdp.ltx.device_ranks import DeviceFailure

    def fail_on_the_clone(device):
        if device is not None:
            raise RuntimeError("simulated fault on this device")

    with fake_devices(2):
        failing = cfg_split(sequence(AtBlock(1, fail_on_the_clone).on(ltxv3)), 2)
        failed = r"a video shard of this model call failed on cpu:1: RuntimeError: simulated fault on this device"
        with pytest.raises(DeviceFailure, match=failed):
            ksample(comfy, failing, _latent())
        assert not pool_threads(), f"MultiGPU pool threads still running after the failure: {pool_threads()}"
        again = ksample(comfy, cfg_split(sequence(ltxv3), 2), _latent())
    single = ksample(comfy, ltxv3, _latent())
    err = relative_error(again, single)
    assert err <= BOUND, f"the run after the failure differs from one device by {err:.3e}"


def test_cancel_stops_every_device_within_a_block(comfy, ltxv3):
    """With a progress hook that raises the interrupt at every update, as ComfyUI's server's does. Cancel pressed
    in block 1 of the first call on this device: this device takes it before block 2, the other device stops at
    its next block or in the exchange; of 3 blocks x 2 devices x 2 steps at most 5 run."""
    import comfy.model_management as mm

    def press_cancel(device):
        if device is None:
            mm.interrupt_current_processing(True)  # what the UI's Cancel button sets

    import comfy.utils as comfy_utils

    def server_hook(value, total, preview=None, prompt_id=None, node_id=None):
        mm.throw_exception_if_processing_interrupted()  # what ComfyUI's server hook does at every progress update

    probe = AtBlock(1, press_cancel)
    before = comfy_utils.PROGRESS_BAR_HOOK
    comfy_utils.set_progress_bar_global_hook(server_hook)
    with fake_devices(2):
        model = cfg_split(sequence(probe.on(ltxv3)), 2)
        try:
            with pytest.raises(mm.InterruptProcessingException):
                ksample(comfy, model, _latent())
        finally:
            interrupted = mm.processing_interrupted()
            mm.interrupt_current_processing(False)
            comfy_utils.set_progress_bar_global_hook(before)
        assert not pool_threads(), f"MultiGPU pool threads still running after the interrupt: {pool_threads()}"
    assert not interrupted, "the interrupt was not taken (ComfyUI's flag is still set)"
    assert probe.blocks <= 2 * LAYERS - 1, f"{probe.blocks} block calls ran after Cancel in the first call's block 1"
    with fake_devices(2):
        again = ksample(comfy, cfg_split(sequence(ltxv3), 2), _latent())
    single = ksample(comfy, ltxv3, _latent())
    assert relative_error(again, single) <= BOUND, "the run after Cancel differs from one device"
