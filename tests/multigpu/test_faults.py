"""Faults: a killed or silent worker fails the prompt with its rank named, after waiting out no timeout (killed)
or exactly one (silent), leaves no process behind, and the next run starts fresh workers; an interrupt stops
every rank and keeps the group. The count of timeouts waited out is rank 0's own record
(`Session.stats["timeouts"]`), so these tests do not depend on how fast a loaded machine runs."""

from __future__ import annotations

import os
import signal

import pytest

from ltx_tdp_devkit.fault_probes import fault_latent, on_rank0_tile
from ltx_tdp_devkit.ltx_helpers import ksample, tdp_2x2

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("sig, timeout_s, expected, timeouts", [
    (signal.SIGKILL, 60.0, "was killed by SIGKILL", 0),
    (signal.SIGSTOP, 10.0, "stopped answering", 1),
], ids=["killed", "stopped"])
def test_a_failed_worker_fails_the_prompt_naming_its_rank_and_the_next_run_works(
        comfy, ltxv, group_factory, live_workers, sig, timeout_s, expected, timeouts):
    from ltx_tdp.multigpu.settings import TDPGroupError

    group = group_factory(2, timeout_s=timeout_s)
    reference = ksample(comfy, tdp_2x2(ltxv), fault_latent(), steps=3)
    session = group.session()
    victim = session.procs[1].pid

    def strike() -> None:
        os.kill(victim, sig)

    model = on_rank0_tile(tdp_2x2(ltxv, group), 3, strike)  # rank 0 runs 2 of 4 tiles: mid-call 2 of 3
    with pytest.raises(TDPGroupError) as failure:
        ksample(comfy, model, fault_latent(), steps=3)
    message = str(failure.value)
    assert "rank 1" in message and expected in message, message
    assert session.stats["timeouts"] == timeouts, \
        f"rank 0 waited out {session.stats['timeouts']} timeouts before failing (expected {timeouts})"
    assert not live_workers(), f"worker processes left after the failure: {live_workers()}"

    again = ksample(comfy, tdp_2x2(ltxv, group), fault_latent(), steps=3)
    err = (again - reference).abs().max().item()
    assert err <= 1e-5, f"the run after the failure differs from single-process by {err:.3e}"
    assert group.session().procs[1].pid != victim, "the next run did not start a fresh worker"


@pytest.mark.parametrize("ranks", [2, 3])
def test_an_interrupt_stops_every_rank_and_the_group_keeps_serving(comfy, ltxv, group_factory, ranks):
    import comfy.model_management as mm

    group = group_factory(ranks)
    reference = ksample(comfy, tdp_2x2(ltxv), fault_latent(), steps=3)
    session = group.session()
    model = on_rank0_tile(tdp_2x2(ltxv, group), 3, lambda: mm.interrupt_current_processing(True))
    try:
        with pytest.raises(mm.InterruptProcessingException):
            ksample(comfy, model, fault_latent(), steps=3)
    finally:
        mm.interrupt_current_processing(False)
    assert group.session() is session and not session.closed, f"the interrupt tore the {ranks}-rank group down"
    again = ksample(comfy, tdp_2x2(ltxv, group), fault_latent(), steps=3)
    err = (again - reference).abs().max().item()
    assert err <= 1e-5, f"{ranks} ranks: the run after the interrupt differs from single-process by {err:.3e}"
