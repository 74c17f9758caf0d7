"""Core's step caches with the launcher's worker group: the cache runs on rank 0 once per step, around every
rank's tiles (the workers run the plain model on their tiles), so 2 ranks + cache equal one process + cache:
the same skipped steps, the same steps within the group's bound."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.ltx_helpers import randn, tdp_2x2
from ltx_tdp_devkit.step_caches import CACHES, cached, sample, tokenwise_ltxv

pytestmark = pytest.mark.distributed

GROUP_BOUND = 1e-5
"""The bound the group's KSampler runs keep against one process (tests/multigpu/test_weight_patches.py)."""


@pytest.fixture(scope="module")
def tokenwise(comfy, comfy_base):
    return tokenwise_ltxv(comfy, comfy_base)


@pytest.mark.parametrize("kind", CACHES)
def test_two_ranks_with_a_step_cache_equal_one_process_with_it(comfy, tokenwise, group_factory, kind):
    if kind not in __import__("nodes").NODE_CLASS_MAPPINGS:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {kind} node")
    group = group_factory(2)
    latent = randn(1, 128, 3, 8, 10, seed=4)
    local = sample(comfy, tdp_2x2(cached(comfy, tokenwise, kind)), latent)
    multi = sample(comfy, tdp_2x2(cached(comfy, tokenwise, kind), group), latent)
    assert local.skipped, f"{kind} skipped no step: the test shows nothing"
    assert multi.skipped == local.skipped, f"{kind}: 2 ranks skipped {multi.skipped}, one process {local.skipped}"
    err = multi.max_step_diff(local)
    assert err <= GROUP_BOUND, f"{kind}: a step of 2 ranks differs from one process by {err:.3e} (relative)"
