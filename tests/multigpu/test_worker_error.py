"""A worker's own error reaches rank 0: the call fails with the worker's error text and its rank named, no
collective is left waiting, and rank 0 serves the next prompt on a fresh group."""

from __future__ import annotations

import sys

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import call_model, tdp_2x2
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.server import free_port
from ltx_tdp_devkit.external_workers import start_test_worker

pytestmark = pytest.mark.distributed



def test_a_workers_error_text_reaches_rank_0_with_its_rank_named(comfy, comfy_dir, ltxv, group_factory):
    from ltx_tdp.multigpu.settings import TDPGroupError

    sys.path.insert(0, str(PACK_ROOT / "tests" / "multigpu"))
    from faulty_worker import MESSAGE

    port, timeout_s = free_port(), 30
    worker = start_test_worker("faulty_worker.py", comfy_dir, port, timeout_s)
    try:
        group = group_factory(2, timeout_s=timeout_s, external_workers=True, port=port, address="127.0.0.1")
        x = torch.randn(1, 128, 2, 8, 10, generator=torch.Generator().manual_seed(7))
        session = group.session()
        with pytest.raises(TDPGroupError) as failure:
            call_model(tdp_2x2(ltxv, group), x, 0.6)
        message = str(failure.value)
        assert "rank 1" in message and MESSAGE in message, message
        assert session.stats["timeouts"] == 0, \
            f"rank 0 waited out {session.stats['timeouts']} timeouts although the worker reported its error"
        code = worker.wait(timeout=30)
        assert code is not None, "the failed worker kept running after rank 0 ended the group"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        sys.path.remove(str(PACK_ROOT / "tests" / "multigpu"))
    single = call_model(tdp_2x2(ltxv), x, 0.6)
    again = call_model(tdp_2x2(ltxv, group_factory(2, timeout_s=timeout_s)), x, 0.6)
    err = (again - single).abs().max().item()
    assert err <= 1e-6, f"the next call on a fresh 2-rank group differs from single-process by {err:.3e}"
