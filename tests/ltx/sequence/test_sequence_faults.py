"""Faults of LTX Sequence Parallel as on the tile path: a device that fails mid-call names itself, Cancel stops
every device, no MultiGPU pool thread outlives the sampling run, and the next run works. A device whose model call
returns early without running the blocks (a diffusion-model wrapper that skips, as a per-shard step cache would)
does not leave the other waiting in the exchange: the call fails at once, saying why.

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


class ReturnsEarly:
    """A diffusion-model wrapper that returns its input without running the model (the blocks, so the exchange)
    on one device: `clone` (the other device's thread) or this device; every other call runs the model."""

    def __init__(self, on_clone: bool):
        self.on_clone = on_clone
        self.skipped = 0

    def __call__(self, executor, *args, **kwargs):
        options = args[-1] if isinstance(args[-1], dict) else kwargs.get("transformer_options", args[5])
        if (options.get("multigpu_thread_device") is not None) == self.on_clone:
            self.skipped += 1
            return args[0]
        return executor(*args, **kwargs)

    def on(self, model):
        import comfy.patcher_extension as ext

        m = model.clone()
        m.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "tdp_test_returns_early", self)
        return m


@pytest.mark.parametrize("on_clone", [True, False], ids=["other_device_returns_early", "this_device_returns_early"])
def test_a_device_that_returns_without_its_exchanges_fails_the_call_at_once_and_the_next_run_works(
        comfy, ltxv3, on_clone):
    """Before the fix the other device waited in the exchange for ever (no error and no Cancel could end it: the
    device that returned was idle in core's pool); now it is released at once with an error naming the cause."""
    from ltx_tdp.ltx.device_ranks import DeviceFailure

    early = ReturnsEarly(on_clone)
    outcome: list = []

    def sample():
        try:
            with fake_devices(2):
                ksample(comfy, cfg_split(sequence(early.on(ltxv3)), 2), _latent())
            outcome.append("finished")
        except BaseException as e:  # noqa: BLE001 (asserted below)
            outcome.append(e)

    worker = threading.Thread(target=sample, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the sampling run still waits 120 s after a device returned early (the hang)"
    assert early.skipped == 1, f"the wrapper returned early {early.skipped} times, the test shows nothing"
    (error,) = outcome
    assert isinstance(error, DeviceFailure), f"expected a failure naming the cause, got {error!r}"
    assert "skipped the transformer blocks on one device only" in str(error), str(error)
    assert not pool_threads(), f"MultiGPU pool threads still running after the failure: {pool_threads()}"
    with fake_devices(2):
        again = ksample(comfy, cfg_split(sequence(ltxv3), 2), _latent())
    single = ksample(comfy, ltxv3, _latent())
    assert relative_error(again, single) <= BOUND, "the run after the failure differs from one device"
