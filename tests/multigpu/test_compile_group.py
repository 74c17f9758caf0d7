"""Core's TorchCompileModel (inductor) with the launcher's worker group: rank 0 runs its tiles through the compiled
model, the workers run theirs on their own modules, uncompiled (a compiled module cannot travel), and 2 ranks equal
one process with the same compiled model within the compile's fp32 rounding; on rank 0, a third step and the next
prompt compile nothing more and break no graph (Dynamo's counters, this process)."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.compiled import breaks, compile_model, fresh_dynamo, graphs  # noqa: F401 (fixture)
from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2

pytestmark = pytest.mark.distributed

ROUNDING = 1e-4
"""Largest abs difference between a compiled and an eager run (tests/ltx/model/test_torch_compile.py)."""


def test_two_ranks_with_a_compiled_model_equal_one_process_with_it(comfy, ltxv, group_factory):
    group = group_factory(2)
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    local = ksample(comfy, tdp_2x2(compile_model(comfy, ltxv)), latent, steps=2)
    assert graphs() >= 1, "dynamo compiled nothing: the test shows nothing"
    multi = ksample(comfy, tdp_2x2(compile_model(comfy, ltxv), group), latent, steps=2)
    err = (multi - local).abs().max().item()
    assert err <= ROUNDING, f"2 ranks with a compiled model differ from one process by {err:.3e}"


def test_rank_0_compiles_nothing_more_for_a_third_step_or_the_next_prompt(comfy, ltxv, group_factory):
    import torch

    group = group_factory(2)
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    counts = {}
    for steps in (2, 3):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        model = tdp_2x2(compile_model(comfy, ltxv), group)
        ksample(comfy, model, latent, steps=steps)
        counts[steps] = (graphs(), breaks())
    ksample(comfy, model, latent, seed=4, steps=3)
    again = (graphs(), breaks())
    assert counts[3][0] >= 1 and not counts[3][1], f"rank 0 of the group: {counts[3]}"
    assert counts[2] == counts[3] == again, f"graphs grew with steps or prompts: {counts}, next prompt {again}"
