"""Fixtures of the multi-GPU tests: worker groups on the CPU (gloo, real processes), and a check that no
worker process outlives a test module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import load_ltxv

WORKER_SCRIPT = "multigpu/worker_main.py"
TIMEOUT_S = 120.0
"""The group timeout of tests that inject no fault: long, so that a machine shared with other jobs never
turns a slow collective into a failure (a timeout only costs time when a test waits one out on purpose)."""


def worker_pids() -> list[int]:
    """Live children of this test process (zombies excluded) that run this pack's worker script.

    Only children: other test runs on the same machine have workers of their own."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if WORKER_SCRIPT in cmdline and state != "Z" and int(ppid) == os.getpid():
            pids.append(int(entry.name))
    return pids


def make_group(world: int, timeout_s: float = TIMEOUT_S, **kw):
    """A CPU group of `world` ranks (started on first use), one torch thread per worker (see `one_torch_thread`)."""
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import GroupSettings

    kw.setdefault("threads", 1)
    return get_group(GroupSettings(devices=("cpu",) * world, backend="gloo", timeout_s=timeout_s, **kw))


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Rank 0 (this process) computes with one torch thread while a module's tests run, as every worker does.

    With two threads per process, a tiny fp8 model's tiles came out up to 1.4e-6 apart between two processes on
    an AMD EPYC (AVX-512) machine, even with MKL's strict reproducibility (tests/conftest.py), though each
    process repeats its own bits: the bit-for-bit comparisons of a group against one process then fail. One
    thread each gives the same bits, and no more threads than the 2 cores CI has."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", autouse=True)
def no_worker_left_behind():
    yield
    from ltx_tdp.multigpu.group import shutdown_all

    shutdown_all()
    left = worker_pids()
    assert not left, f"worker processes left running: {left}"


@pytest.fixture(scope="session")
def group_factory():
    """make_group(world, timeout_s=TIMEOUT_S, **settings): a CPU gloo group of `world` ranks, started on first use."""
    return make_group


@pytest.fixture(scope="session")
def live_workers():
    """live_workers() -> pids of every running worker process of this pack."""
    return worker_pids


@pytest.fixture(scope="module")
def ltxv(comfy, model_names):
    return load_ltxv(comfy, model_names)
