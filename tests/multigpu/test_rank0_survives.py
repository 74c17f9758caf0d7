"""Rank 0 (ComfyUI) survives every worker fault: a worker killed or stopped after its ack, before the
all_reduce, fails the call with its rank named, rank 0 aborts the group and no process is left; the NCCL
error handling that keeps the watchdog from killing ComfyUI is in force before the group starts. (An
interrupt during a 2- or 3-rank call: test_faults.py.) A worker frozen halfway through its ack is named after
one timeout. How many timeouts rank 0 waited out before failing is its own record (`Session.stats["timeouts"]`):
these tests assert that count, not wall time, so a loaded machine cannot fail them."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from ltx_tdp_devkit.fault_probes import fault_latent, on_rank0_tile
from ltx_tdp_devkit.ltx_helpers import call_model, ksample, tdp_2x2
from ltx_tdp_devkit.server import free_port
from ltx_tdp_devkit.external_workers import start_test_worker

pytestmark = pytest.mark.distributed

NCCL_REASON = "the NCCL fault test needs two CUDA GPUs (this machine has %d)" % torch.cuda.device_count()


@pytest.mark.parametrize("backend, devices, sig, timeout_s, expected, timeouts", [
    ("gloo", ("cpu", "cpu"), signal.SIGKILL, 60.0, "was killed by SIGKILL", 0),
    ("gloo", ("cpu", "cpu"), signal.SIGSTOP, 10.0, "stopped answering", 1),
    pytest.param("nccl", ("cuda:0", "cuda:1"), signal.SIGKILL, 60.0, "was killed by SIGKILL", 0,
                 marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason=NCCL_REASON)),
], ids=["gloo-killed", "gloo-stopped", "nccl-killed"])
def test_a_worker_failing_after_its_ack_fails_the_call_naming_it_and_rank_0_lives_on(
        comfy, ltxv, live_workers, backend, devices, sig, timeout_s, expected, timeouts):
    import torch.distributed as dist

    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import GroupSettings, TDPGroupError

    group = get_group(GroupSettings(devices=devices, backend=backend, timeout_s=timeout_s))
    reference = ksample(comfy, tdp_2x2(ltxv), fault_latent(), steps=3)
    session = group.session()
    victim = session.procs[1].pid

    def strike_after_ack() -> None:
        """Rank 0's last tile of call 2: wait until rank 1 acked this call, then signal it."""
        key, deadline = f"ack/{session.pending}/1", time.monotonic() + 120
        while not session.store.check([key]):
            assert time.monotonic() < deadline, f"rank 1 never acked message {session.pending}"
            time.sleep(0.01)
        os.kill(victim, sig)

    model = on_rank0_tile(tdp_2x2(ltxv, group), 4, strike_after_ack)  # rank 0 runs tiles 0, 2: call 2, its 2nd
    with pytest.raises(TDPGroupError) as failure:
        ksample(comfy, model, fault_latent(), steps=3)
    message = str(failure.value)
    assert "rank 1" in message and expected in message, message
    assert session.stats["timeouts"] == timeouts, \
        f"rank 0 waited out {session.stats['timeouts']} timeouts before failing (expected {timeouts})"
    assert not live_workers(), f"worker processes left after the failure: {live_workers()}"
    assert session.ended == "aborted" and not dist.is_initialized(), \
        f"rank 0 did not abort the process group after the fault (it was {session.ended})"

    again = ksample(comfy, tdp_2x2(ltxv, group), fault_latent(), steps=3)
    err = (again - reference).abs().max().item()
    assert err <= 1e-5, f"the run after the fault differs from single-process by {err:.3e}"
    assert group.session().procs[1].pid != victim, "the next run did not start a fresh worker"
    group.shutdown()


def test_nccl_error_handling_only_aborts_the_communicator_and_is_set_before_the_group_starts(
        ltxv, group_factory, monkeypatch, caplog):
    """torch's default TORCH_NCCL_ASYNC_ERROR_HANDLING=3 kills the process on a failed collective; rank 0 sets
    2 (abort the communicator only) and turns off the monitor that kills a process whose watchdog hangs,
    even over a user's 3. Read when the process group is built: checked at that moment (gloo here; the
    variables are the same for NCCL, which reads them in ProcessGroupNCCL's constructor)."""
    from ltx_tdp.multigpu.nccl import RANK0_NCCL_ENV

    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    group = group_factory(2)
    group.shutdown()
    session = group.session()
    expected = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "TORCH_NCCL_ENABLE_MONITORING": "0"}
    assert RANK0_NCCL_ENV == expected, RANK0_NCCL_ENV
    assert session.env_at_init == expected, f"at init_process_group: {session.env_at_init}"
    assert any("would let a failing worker kill ComfyUI" in r.getMessage() for r in caplog.records), \
        "overriding the user's TORCH_NCCL_ASYNC_ERROR_HANDLING=3 was not logged"
    group.shutdown()


def test_a_worker_frozen_between_its_ack_and_its_count_is_named_within_the_timeout(comfy, comfy_dir, ltxv,
                                                                                    group_factory):
    """Acks are a key per worker plus a TCPStore.add counter, and rank 0 waits for the counter's last step. A
    worker frozen between the two leaves every ack key written and the count short: rank 0 must fail after
    one timeout, naming it, rather than take the acks as complete and wait out a second timeout in the
    all_reduce. (The worker stops itself at that instant: tests/multigpu/faulty_worker.py.)"""
    from ltx_tdp.multigpu.settings import TDPGroupError

    port, timeout_s = free_port(), 10.0
    worker = start_test_worker("faulty_worker.py", comfy_dir, port, 30, TDP_FAULT="stall-mid-ack")
    try:
        group = group_factory(2, timeout_s=timeout_s, external_workers=True, port=port, address="127.0.0.1")
        x = fault_latent()["samples"]
        session = group.session()
        with pytest.raises(TDPGroupError) as failure:
            call_model(tdp_2x2(ltxv, group), x, 0.6)
        message = str(failure.value)
        assert "rank 1" in message and "stopped answering" in message, message
        assert session.stats["timeouts"] == 1, \
            f"rank 0 waited out {session.stats['timeouts']} timeouts before naming the frozen rank (expected 1)"
        assert worker.poll() is None, "the frozen worker should still be there (stopped), not have exited"
    finally:
        worker.kill()  # SIGKILL ends a stopped process too
        worker.wait(timeout=30)
    again = call_model(tdp_2x2(ltxv, group_factory(2, timeout_s=timeout_s)), x, 0.6)
    err = (again - call_model(tdp_2x2(ltxv), x, 0.6)).abs().max().item()
    assert err <= 1e-6, f"the next call on a fresh 2-rank group differs from single-process by {err:.3e}"
