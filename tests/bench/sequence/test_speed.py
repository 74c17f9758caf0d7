"""The two-stage benchmark (bench/sequence/speed.py) at its smallest size: both settings run through ComfyUI's
KSampler on the tiny LTXV, 2 devices (a hardware mock of the device list, ComfyUI's own MultiGPU clones and
thread pool) against 1, and the page carries every row with its figures. Times are not checked (shared cores)."""

from __future__ import annotations

import math
import re

import pytest

from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu

FP32_BOUND = 1e-5
"""The sequence path's stated bound against one device (fp32 rounding), carried through stage 2."""


def test_the_benchmark_runs_both_stages_on_two_devices_and_writes_its_page(comfy, model_names):
    from ltx_tdp.bench.sequence import speed

    if not has_core_multigpu():
        pytest.skip(SKIP_REASON)
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxv"], weight_dtype="default")
    times = speed.measure(model, speed.SMOKE, runs=1)
    assert set(times) == {"1 device", "2 devices"}, set(times)
    one, two = times["1 device"], times["2 devices"]
    for t in (one, two):
        assert len(t.stage1) == len(t.stage2) == len(t.whole) == len(t.cpu["whole"]) == 1, t
        assert all(w >= a + b - 1e-6 for w, a, b in zip(t.whole, t.stage1, t.stage2)), t
    f, h, w = speed.SMOKE.stage1_latent
    assert one.outputs[0].shape[-3:] == (f, h, w) and one.outputs[1].shape[-3:] == (f, 2 * h, 2 * w), one.outputs[1].shape
    diffs = [float((a - b).abs().max()) for a, b in zip(one.outputs, two.outputs)]
    assert all(d <= FP32_BOUND for d in diffs), f"2 devices differ from 1 by {diffs} (bound {FP32_BOUND})"
    page = speed.markdown(times, speed.SMOKE, {"num_layers": 1}, 1.0, ((0.0,) * 3, (0.0,) * 3))
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert [r.split(" | ")[0] for r in rows] == ["| stage-1 model call, LTX Sequence Parallel",
                                                 "| stage-2 model call, TDP tiles", "| whole two-stage run"], rows
    for r in rows:
        ms1, ms2, med, best = (float(x) for x in re.split(r"\s*\|\s*", r)[2:6])
        assert ms1 > 0 and ms2 > 0 and math.isfinite(med) and math.isfinite(best), r
