"""Workers started by hand with the documented command (as on another host) join over TCP; on loopback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import call_model, tdp_2x2
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.server import free_port

pytestmark = pytest.mark.distributed



def documented_command(comfy_dir, rank: int, world: int, port: int) -> list[str]:
    """The documented multi-host command (docs/multi-gpu.md), with this machine's python."""
    return [sys.executable, str(PACK_ROOT / "multigpu" / "worker_main.py"), "--comfyui-dir", str(comfy_dir),
            "--rank", str(rank), "--world-size", str(world), "--master-addr", "127.0.0.1",
            "--master-port", str(port), "--device", "cpu", "--timeout", "30"]


def test_external_workers_join_by_the_documented_command_and_results_match(comfy, comfy_dir, ltxv, group_factory):
    port = free_port()
    workers = [subprocess.Popen(documented_command(comfy_dir, r, 3, port), start_new_session=True) for r in (1, 2)]
    try:
        group = group_factory(3, timeout_s=30, external_workers=True, port=port, address="127.0.0.1")
        x = torch.randn(1, 128, 2, 8, 10, generator=torch.Generator().manual_seed(7))
        single = call_model(tdp_2x2(ltxv), x, 0.6)
        multi = call_model(tdp_2x2(ltxv, group), x, 0.6)
        err = (multi - single).abs().max().item()
        assert err <= 1e-6, f"3 ranks (2 external): x0 differs by {err:.3e} (limit 1e-6)"
        assert group.session().procs == {}, "rank 0 started workers although they were external"
        group.shutdown()
        codes = [w.wait(timeout=20) for w in workers]
        assert codes == [0, 0], f"external workers ended with {codes} after rank 0 shut the group down"
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def test_the_group_listens_only_on_the_configured_address(comfy, ltxv, group_factory):
    import psutil

    group = group_factory(2)
    call_model(tdp_2x2(ltxv, group), torch.zeros(1, 128, 1, 8, 8), 0.5)
    session = group.session()
    for proc in [psutil.Process(), *(psutil.Process(p.pid) for p in session.procs.values())]:
        connections = getattr(proc, "net_connections", None) or proc.connections
        listening = [c.laddr for c in connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening, f"pid {proc.pid} listens on nothing"
        wrong = [a for a in listening if a.ip not in ("127.0.0.1", "::ffff:127.0.0.1")]
        assert not wrong, f"pid {proc.pid} listens beyond 127.0.0.1: {wrong}"
