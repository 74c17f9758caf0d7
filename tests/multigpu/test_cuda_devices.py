"""The launcher on a GPU machine as ComfyUI's `--cuda-device N` leaves it: CUDA_VISIBLE_DEVICES=N, so torch in
ComfyUI sees one GPU and calls it cuda:0. Device lists name machine GPUs; each local worker gets its own GPU
as its only visible one and computes on cuda:0, wherever ComfyUI itself runs.

Mocked, because this machine has no GPU: torch's view of CUDA as the launcher sees it (`is_available`,
`device_count`: the GPUs a narrowed process sees), and, for the worker start, `subprocess.Popen` (a worker
on a GPU cannot start here); the command and environment it receives are the real launcher's.
"""

from __future__ import annotations

import logging

import pytest
import torch

pytestmark = pytest.mark.distributed


@pytest.fixture
def gpus(monkeypatch):
    """gpus(visible_count, CUDA_VISIBLE_DEVICES or None): torch in this process sees that many CUDA GPUs."""

    def see(count: int, visible: str | None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)

    return see


def _resolve(ranks: int, devices: str, local: str = "cuda:0"):
    from ltx_tdp.multigpu.settings import resolve_settings

    return resolve_settings(ranks, devices, "auto", 60, "127.0.0.1", 0, local_device=local)


def test_with_cuda_device_3_a_device_list_names_machine_gpus_and_rank_0_keeps_comfyuis_cuda_0(gpus):
    gpus(1, "3")  # ComfyUI started with --cuda-device 3
    s = _resolve(2, "cuda:3,cuda:5")
    assert s.devices == ("cuda:3", "cuda:5"), f"devices by machine number: {s.devices}"
    assert s.rank0_device == "cuda:0", f"rank 0 computes on ComfyUI's own cuda:0, not {s.rank0_device}"
    if torch.distributed.is_nccl_available():
        assert s.backend == "nccl", f"two distinct GPUs pick NCCL, not {s.backend}"


def test_without_a_device_list_a_narrowed_comfyui_refuses_to_stack_every_rank_on_its_gpu(gpus):
    from ltx_tdp.multigpu.settings import TDPGroupError

    gpus(1, "3")
    with pytest.raises(TDPGroupError) as refused:
        _resolve(2, "")
    text = str(refused.value)
    assert "CUDA_VISIBLE_DEVICES=3" in text and "--cuda-device" in text and "cuda:3,cuda:N" in text, text


def test_without_a_device_list_ranks_take_the_next_gpus_comfyui_sees_by_their_machine_numbers(gpus):
    gpus(4, None)  # every GPU visible; ComfyUI on cuda:1
    assert _resolve(3, "", local="cuda:1").devices == ("cuda:1", "cuda:2", "cuda:3")
    gpus(4, "2,0,1,3,4,5,6,7")  # --default-device 2: all visible, GPU 2 first (CUDA stops at the first it lacks)
    s = _resolve(2, "")
    assert s.devices == ("cuda:2", "cuda:0") and s.rank0_device == "cuda:0", s
    gpus(2, "5,6")  # --cuda-device 5,6
    assert _resolve(2, "").devices == ("cuda:5", "cuda:6")


def test_a_list_not_starting_with_comfyuis_gpu_is_named_in_machine_numbers(gpus, caplog):
    gpus(1, "3")
    with caplog.at_level(logging.WARNING):
        s = _resolve(2, "cuda:0,cuda:1")
    assert s.devices == ("cuda:3", "cuda:1"), s.devices
    assert any("runs on cuda:3" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_each_local_worker_sees_only_its_own_gpu_and_computes_on_cuda_0(comfy, gpus, monkeypatch):
    """The launcher's real worker start, with Popen mocked: the command and environment a worker would get."""
    import subprocess

    from ltx_tdp.multigpu import launch

    gpus(1, "3")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3")  # ComfyUI sets both
    s = _resolve(3, "cuda:3,cuda:5,cuda:6")
    started = []

    class Started:
        pid = 1

        def __init__(self, cmd, **kw):
            started.append((cmd, kw["env"]))

        def wait(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Started)
    launch.start_local_workers(s, 12345, lambda r: None)
    assert len(started) == 2, started
    for (cmd, env), machine in zip(started, ("5", "6")):
        device = cmd[cmd.index("--device") + 1]
        assert device == "cuda:0", f"the worker on machine GPU {machine} is told {device}"
        assert env["CUDA_VISIBLE_DEVICES"] == machine and env["HIP_VISIBLE_DEVICES"] == machine, \
            f"the worker on machine GPU {machine} sees {env['CUDA_VISIBLE_DEVICES']} / {env['HIP_VISIBLE_DEVICES']}"


def test_a_cpu_group_leaves_the_workers_environment_alone(comfy, monkeypatch):
    from ltx_tdp.multigpu.launch import worker_command
    from ltx_tdp.multigpu.settings import GroupSettings

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    cmd, env = worker_command(GroupSettings(devices=("cpu", "cpu")), 1, 1, "/comfyui")
    assert cmd[cmd.index("--device") + 1] == "cpu" and env["CUDA_VISIBLE_DEVICES"] == "3", (cmd, env)
