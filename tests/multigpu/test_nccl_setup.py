"""How each rank joins an NCCL group: the communicator is built in `init_process_group` (given the rank's
device), not inside the first collective where no timeout counts; and every worker, of the first group or a
later one, runs with the same NCCL error handling, its own, never rank 0's.

NCCL cannot run here (no GPU): `torch.distributed.init_process_group` is replaced by a recorder in the tests
that check what an NCCL rank passes to it. The error-handling test runs real gloo workers (the variables are
read the same way by NCCL, in ProcessGroupNCCL's constructor).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.distributed


@pytest.fixture
def recorded_inits(monkeypatch):
    """Every call of torch.distributed.init_process_group, recorded instead of run (NCCL needs GPUs)."""
    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    for key in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ENABLE_MONITORING"):
        monkeypatch.delenv(key, raising=False)  # restored after the test: rank 0 sets them
    return calls


def test_rank_0_builds_the_nccl_communicator_at_init_on_comfyuis_own_device(comfy, recorded_inits):
    from types import SimpleNamespace

    from ltx_tdp.multigpu.launch import init_process_group
    from ltx_tdp.multigpu.settings import GroupSettings

    settings = GroupSettings(devices=("cuda:3", "cuda:5"), backend="nccl", local_device="cuda:0")
    init_process_group(SimpleNamespace(settings=settings, world=2), dist.HashStore())
    ((backend, kw),) = recorded_inits
    assert backend == "nccl" and kw["rank"] == 0 and kw["world_size"] == 2, (backend, kw)
    assert kw.get("device_id") == torch.device("cuda", 0), \
        f"rank 0 passed device_id={kw.get('device_id')}: without it NCCL builds the communicator in the first collective"


def test_a_worker_builds_the_nccl_communicator_at_init_on_its_device_and_gloo_gets_no_device(comfy, recorded_inits):
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.multigpu.worker import Worker

    for backend, device, expected in (("nccl", "cuda:0", torch.device("cuda", 0)), ("gloo", "cpu", None)):
        worker = Worker.__new__(Worker)
        worker.rank, worker.world, worker.device = 1, 2, torch.device(device)
        worker.config = W.WorkerConfig(2, backend, 30.0, ("cuda:3", "cuda:5"), {}, "ltx_tdp", "x", "y")
        worker.join(dist.HashStore())
        got_backend, kw = recorded_inits.pop()
        assert got_backend == backend and kw["rank"] == 1, (got_backend, kw)
        assert kw.get("device_id") == expected, f"{backend} worker passed device_id={kw.get('device_id')}"


def test_every_groups_workers_get_their_own_nccl_error_handling_not_rank_0s(ltxv, group_factory, monkeypatch):
    """Rank 0 sets TORCH_NCCL_ASYNC_ERROR_HANDLING=2 and monitoring off in its own environment when its first
    group starts; a second group's workers, started from that environment, must not inherit them."""
    import os

    from ltx_tdp.multigpu.nccl import RANK0_NCCL_ENV, WORKER_NCCL_ENV

    for key in RANK0_NCCL_ENV:
        monkeypatch.delenv(key, raising=False)
    group = group_factory(2)
    group.shutdown()
    first = group.session().hellos[1]["nccl_env"]
    assert {k: os.environ.get(k) for k in RANK0_NCCL_ENV} == RANK0_NCCL_ENV, "rank 0 did not set its own values"
    group.shutdown()
    second = group.session().hellos[1]["nccl_env"]
    group.shutdown()
    assert first == second == WORKER_NCCL_ENV, f"first group's worker: {first}, second's: {second}"
    assert WORKER_NCCL_ENV["TORCH_NCCL_ASYNC_ERROR_HANDLING"] != RANK0_NCCL_ENV["TORCH_NCCL_ASYNC_ERROR_HANDLING"]
