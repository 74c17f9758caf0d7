"""An attention backend set before LTX Sequence Parallel (an `optimized_attention_override`, as Sage/Flash nodes
and core's ModelAttentionBackend set it) still runs at every attention call on every device, and gets the gathered
keys: a shard's video self-attention has this shard's queries and every shard's keys. The result equals one device
with the same backend within the path's bound.

HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu, cpu:1 (ltx_tdp_devkit.core_multigpu); core's
deepclones, its MultiGPU thread pool and the pack's sharding are real.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.attention_probes import RecordingAttention
from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.sequence import BOUND, LTXV_LAYERS, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")

TOKENS = 3 * 8 * 10
TEXT_TOKENS = 8


def test_an_override_set_before_the_node_runs_with_the_gathered_keys(comfy, ltxv3):
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    recorder = RecordingAttention()
    single = ksample(comfy, recorder.on(ltxv3), latent, cfg=1.0)
    one_device = recorder.take()
    assert one_device, "the one-device run never called the override"
    with fake_devices(2):
        multi = ksample(comfy, cfg_split(sequence(recorder.on(ltxv3)), 2), latent, cfg=1.0)
    calls = recorder.take()
    assert len(calls) == 2 * len(one_device), f"{len(calls)} calls on 2 devices, {len(one_device)} on one"
    self_attention = [c for c in calls if c[1] != TEXT_TOKENS]
    assert len(self_attention) == 2 * LTXV_LAYERS * 2, self_attention  # 2 steps x blocks x 2 shards
    assert set(self_attention) == {(TOKENS // 2, TOKENS)}, f"self-attention saw {sorted(set(self_attention))}"
    assert set(c for c in calls if c[1] == TEXT_TOKENS) == {(TOKENS // 2, TEXT_TOKENS)}
    err = relative_error(multi, single)
    assert err <= BOUND, f"2 devices with the override differ from one device by {err:.3e}, bound {BOUND}"
