"""Benchmark of the TDP model patcher (not a test): wrapper overhead, and where tiling starts to pay.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_patcher.py'

1. Wrapper overhead: one patched model call with T tiles, divided by the sum of T bare model calls on the
   same tile crops (target <= 1.03). Everything the wrapper adds is in the numerator: planning, cropping,
   the per-tile positions, the fp32 blend.
2. Scaling: one patched (2 x 2 tiles) and one unpatched model call as the latent grows. Self-attention
   costs O(N^2) in the tokens N; 2 x 2 tiles pay 4 x O((N/4 + overlap)^2), so tiling wins once attention
   dominates the call.

Both run a real ComfyUI (in-process, CPU) and a real LTXVModel loaded by UNETLoader, through ComfyUI's own
`apply_model` and wrapper chain. The test model (1 layer, 16 wide) is almost all linear layers, so the
bench builds a wider one (BENCH_MODEL) to make attention weigh what it weighs in LTX. Results go to
bench/results/patcher.md and bench/results/patcher_scaling.png. About 2-3 minutes on 2 CPU cores.

Times are CPU seconds of this process with one torch thread, the best of several runs: on a shared
machine, wall time swings with other jobs, CPU time hardly does. Environment: TDP_BENCH_THREADS (torch
threads, default 1), TDP_BENCH_QUICK=1 (a smaller sweep that writes nothing).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
from ltx_tdp_devkit import comfy_runtime, tiny_models
from ltx_tdp_devkit.pack import import_pack

import_pack()  # the pack as `ltx_tdp` (it imports nothing of ComfyUI until asked), for the benchmark's modules
from ltx_tdp.bench.patcher.cases import BENCH_MODEL, OVERHEAD_CASES, SCALING_SIZES, Case  # noqa: E402
from ltx_tdp.bench.patcher.measure import measure_overhead, measure_scaling  # noqa: E402
from ltx_tdp.bench.patcher.report import markdown, plot_scaling  # noqa: E402

log = logging.getLogger("ltx_tdp.bench")


def _setup(base: Path) -> tuple[object, str]:
    comfy_runtime.start_script(base)
    tiny_models.build_ltxv(base / "models" / "diffusion_models" / "bench_ltxv.safetensors", **BENCH_MODEL)
    import folder_paths

    folder_paths.filename_list_cache.clear()
    (model,) = comfy_runtime.run_node("UNETLoader", unet_name="bench_ltxv.safetensors", weight_dtype="default")
    return model, comfy_runtime.comfyui_version()


def main() -> int:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[bench] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    threads = int(os.environ.get("TDP_BENCH_THREADS", 1))  # one thread: CPU time is then the cost of the work
    torch.set_num_threads(max(1, threads))
    quick = os.environ.get("TDP_BENCH_QUICK") == "1"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ltx-tdp-bench.") as base:
        return _run(Path(base), quick, t0)


def _run(base: Path, quick: bool, t0: float) -> int:
    model, comfy_version = _setup(base)
    log.info("ComfyUI %s, torch %s, %d threads, model %s", comfy_version, torch.__version__,
             torch.get_num_threads(), BENCH_MODEL)

    overhead = []
    for case in OVERHEAD_CASES[:1] if quick else OVERHEAD_CASES:
        r = measure_overhead(model, case, repeats=3 if quick else 11)
        overhead.append(r)
        log.info("overhead %s %dx%d tiles: patched %.1f ms, bare sum %.1f ms, direct %.3f, paired %.3f, "
                 "own work %.2f ms", case.pixels(), *case.tiles, r["patched"] * 1e3, r["bare"] * 1e3, r["ratio"],
                 r["paired"], r["own"] * 1e3)

    scaling = []
    for size in SCALING_SIZES[:4] if quick else SCALING_SIZES:
        case = Case(4, size, size, (2, 2), 2 if size < 12 else 4)
        r = measure_scaling(model, case, repeats=2 if quick else 3, budget_s=2.0 if quick else 6.0)
        scaling.append(r)
        log.info("scaling %s (%d tokens): unpatched %.1f ms, 2x2 TDP %.1f ms", case.pixels(), case.tokens,
                 r["bare"] * 1e3, r["patched"] * 1e3)

    if quick:
        log.info("quick run (TDP_BENCH_QUICK=1): results not written, %.0f s", time.monotonic() - t0)
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot_scaling(scaling, RESULTS / "patcher_scaling.png")
    (RESULTS / "patcher.md").write_text(markdown(overhead, scaling, comfy_version, time.monotonic() - t0))
    log.info("wrote %s and %s in %.0f s", RESULTS / "patcher.md", RESULTS / "patcher_scaling.png",
             time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
