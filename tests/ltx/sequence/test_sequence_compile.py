"""Core ComfyUI's TorchCompileModel (backend inductor, CPU) stacked on LTX Sequence Parallel over 2 devices.

What it proves, on the tiny 1-layer LTXV (`ltxv` fixture, UNETLoader) sampled by a real KSampler: compile + SP on 2
devices equals compile on one device within the sequence path's bound, and the graphs and graph breaks dynamo reports
do not grow from 2 to 3 steps, nor on the next prompt; the breaks SP adds (its block replace, ltx/sequence/blocks.py, and its attention
override, ltx/sequence/attention.py) are counted and named against the same model compiled without the pack.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(2)` makes this CPU report cpu and cpu:1 to ComfyUI; the
deepclones MultiGPU CFG Split builds, the guider's thread pool, the pack's shards and all-gather are real.
Skipped where ComfyUI has no comfy/multigpu.py (0.3.75).
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.compiled import breaks, compile_model, fresh_dynamo, graphs  # noqa: F401 (fixture)
from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv  # noqa: F401 (fixture)
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.sequence import BOUND, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")


def test_compiled_sequence_parallel_equals_compiled_one_device(comfy, ltxv) -> None:
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    single = ksample(comfy, compile_model(comfy, ltxv), latent, steps=2)
    plain = (graphs(), breaks())
    runs = {}
    for steps in (2, 3):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        with fake_devices(2):
            model = cfg_split(sequence(compile_model(comfy, ltxv)), 2)
            out = ksample(comfy, model, latent, steps=steps)
            runs[steps] = (out, (graphs(), breaks()))
            if steps == 3:  # the next prompt on the same model: another seed, the same shapes
                ksample(comfy, model, latent, seed=4, steps=3)
                again = (graphs(), breaks())
    print(f"plain {plain[0]} graphs {dict(plain[1])}; SP: " + "; ".join(
        f"{s} steps: {g} graphs, breaks {dict(b)}" for s, (_, (g, b)) in runs.items()))
    err = relative_error(runs[2][0], single)
    print(f"SP+compile vs compile: relative {err:.3e}")
    assert plain[0] >= 1, "dynamo compiled nothing on one device"
    assert err <= BOUND, f"compile + SP on 2 devices differs from compile on one by {err:.3e} (relative), bound {BOUND}"
    (g2, b2), (g3, b3) = runs[2][1], runs[3][1]
    assert g2 == g3, f"SP compiled {g2} graphs in 2 steps, {g3} in 3"
    assert set(b2) == set(b3), f"SP's graph-break kinds changed from 2 to 3 steps: {sorted(b2)} vs {sorted(b3)}"
    assert again[0] == g3 and set(again[1]) == set(b3), f"the next prompt compiled more: {again} after {(g3, b3)}"
