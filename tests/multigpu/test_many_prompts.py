"""20 consecutive 2-rank prompts: the same worker serves them all, no process is added, and neither rank 0
nor the worker grows in memory (RSS growth under 5 % from prompt 3 to prompt 20)."""

from __future__ import annotations

import gc

import pytest

from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2

pytestmark = pytest.mark.distributed

PROMPTS = 20


def test_20_consecutive_2_rank_prompts_leak_no_process_and_no_memory(comfy, ltxv, group_factory, live_workers):
    import psutil

    group = group_factory(2)
    rank0, worker, rss = psutil.Process(), None, []
    for prompt in range(PROMPTS):
        ksample(comfy, tdp_2x2(ltxv, group), {"samples": randn(1, 128, 2, 8, 8, seed=prompt)}, seed=prompt, steps=2)
        gc.collect()
        pids = live_workers()
        assert len(pids) == 1, f"after prompt {prompt + 1}: worker processes {pids}"
        worker = worker or psutil.Process(pids[0])
        assert pids == [worker.pid], f"prompt {prompt + 1} ran on a new worker {pids} (first: {worker.pid})"
        rss.append((rank0.memory_info().rss, worker.memory_info().rss))
    (r0_start, w_start), (r0_end, w_end) = rss[2], rss[-1]  # from prompt 3: the first ones load and warm up
    for name, start, end in (("rank 0", r0_start, r0_end), ("worker", w_start, w_end)):
        growth = (end - start) / start
        assert growth < 0.05, (f"{name} RSS grew {growth * 100:.1f} % from prompt 3 to prompt {PROMPTS} "
                               f"({start / 2**20:.0f} -> {end / 2**20:.0f} MiB)")
    group.shutdown()
