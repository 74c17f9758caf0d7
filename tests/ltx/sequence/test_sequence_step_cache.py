"""Core's step caches with LTX Sequence Parallel: the cache decides and reuses once per step around the whole
sharded call, as on one device, never once per shard.

On the tiny LTXV whose tokens are independent (attention output projections zeroed, ltx_tdp_devkit.step_caches),
2 devices + cache equal one device + cache within the path's bound at every step, with the same skipped steps,
the cache before or after the node.

HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu, cpu:1 (ltx_tdp_devkit.core_multigpu); core's
deepclones, its MultiGPU thread pool and the pack's sharding are real.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import randn
from ltx_tdp_devkit.sequence import BOUND, BlockRows, sequence
from ltx_tdp_devkit.step_caches import CACHES, cached, sample, tokenwise_ltxv

pytestmark = pytest.mark.usefixtures("core_multigpu")


@pytest.fixture(scope="module")
def tokenwise(comfy, comfy_base):
    return tokenwise_ltxv(comfy, comfy_base)


@pytest.mark.parametrize("order", ["cache_then_sequence", "sequence_then_cache"])
@pytest.mark.parametrize("kind", CACHES)
def test_two_devices_with_a_step_cache_equal_one_device_with_it_step_for_step(comfy, tokenwise, kind, order):
    if kind not in __import__("nodes").NODE_CLASS_MAPPINGS:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {kind} node")
    latent = randn(1, 128, 3, 8, 10, seed=4)
    single = sample(comfy, cached(comfy, tokenwise, kind), latent, cfg=1.0)  # one cond: sharded, not split by cond
    rows = BlockRows()
    with fake_devices(2):
        inner = rows.on(tokenwise, 1)
        model = sequence(cached(comfy, inner, kind)) if order == "cache_then_sequence" else cached(comfy, sequence(inner), kind)
        multi = sample(comfy, cfg_split(model, 2), latent, cfg=1.0)
    assert single.skipped, f"{kind} skipped no step on one device: the test shows nothing"
    assert multi.skipped == single.skipped, f"{kind}, {order}: skipped {multi.skipped}, one device {single.skipped}"
    assert set(rows.rows) == {120}, f"blocks ran {sorted(set(rows.rows))} of the 240 video tokens, not 2 shards"
    err = multi.max_step_diff(single)
    assert err <= BOUND, f"{kind}, {order}: a step differs from one device by {err:.3e} (relative), bound {BOUND}"
