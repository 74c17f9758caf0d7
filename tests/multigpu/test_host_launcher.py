"""One command per host starts that host's ranks (torch's start_processes, one per GPU): here `--gpus 2
--first-rank 1 --device cpu` on loopback joins a 3-rank group whose rank 0 is this ComfyUI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import call_model, tdp_2x2
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.server import free_port

pytestmark = pytest.mark.distributed



def test_one_host_command_starts_2_local_ranks_that_join_a_3_rank_group(comfy, comfy_dir, ltxv, group_factory):
    port = free_port()
    host = subprocess.Popen([sys.executable, str(PACK_ROOT / "multigpu" / "worker_main.py"), "--comfyui-dir",
                             str(comfy_dir), "--gpus", "2", "--first-rank", "1", "--world-size", "3",
                             "--master-addr", "127.0.0.1", "--master-port", str(port), "--device", "cpu",
                             "--timeout", "60"], start_new_session=True)
    try:
        group = group_factory(3, timeout_s=60, external_workers=True, port=port, address="127.0.0.1")
        x = torch.randn(1, 128, 2, 8, 10, generator=torch.Generator().manual_seed(7))
        single = call_model(tdp_2x2(ltxv), x, 0.6)
        multi = call_model(tdp_2x2(ltxv, group), x, 0.6)
        err = (multi - single).abs().max().item()
        assert err <= 1e-6, f"3 ranks (2 from one host command): x0 differs by {err:.3e} (limit 1e-6)"
        hosts = {h["rank"]: h["pid"] for h in group.session().hellos.values()}
        assert sorted(hosts) == [1, 2] and len(set(hosts.values())) == 2, f"ranks that said hello: {hosts}"
        group.shutdown()
        code = host.wait(timeout=60)
        assert code == 0, f"the host command ended with {code} after rank 0 shut the group down"
    finally:
        if host.poll() is None:  # the command and its ranks share one process group
            os.killpg(host.pid, signal.SIGKILL)
            host.wait()
