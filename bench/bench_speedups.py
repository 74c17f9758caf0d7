"""Benchmark (not a test): does the pack keep what each speed-up users stack on the model gives?

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_speedups.py'

For each speed-up (core's EasyCache at its node defaults; core's TorchCompileModel, inductor, timed after a warm-up
run that compiles every shape), the wall time of one KSampler run with and without it, on the untiled model and
on the 2 x 2 TDP model. speed-up = time without / time with; the pack keeps a tool's speed-up when the TDP speed-up
is at least 90 % of the untiled one (ratio TDP / untiled >= 0.9; above 1, TDP gains more than the untiled run).

The model is the quality benchmark's trained LTXV (bench/quality/trained, ComfyUI's LTXVModel, loaded by
UNETLoader), on the benchmark's four synthetic videos of 32 x 32 latent cells with noise from sigma 0.625 (the
upscale stage's start), KSampler euler / simple, STEPS steps at denoise DENOISE, cfg 1. Runs take turns
(untiled, untiled + tool, TDP, TDP + tool) RUNS times, each timed run right after an untimed one of the same
setting: the untiled model's attention allocates about 1 GB per call and, run right after a TDP run (smaller
buffers), paid for fresh memory pages, which made the untiled runs that followed a TDP run slower and skewed the
ratios (EasyCache: 0.86 taking plain turns). Each figure is the median. One torch thread.
Writes bench/results/speedups.md. About 20 minutes on 2 CPU cores.
Environment: TDP_BENCH_RUNS (default 3), TDP_BENCH_QUICK=1 (one video, 2 runs, writes nothing).
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "speedups.md"
from ltx_tdp_devkit import comfy_runtime  # noqa: E402
from ltx_tdp_devkit.pack import import_pack  # noqa: E402

log = logging.getLogger("ltx_tdp.bench.speedups")

STEPS = 20
DENOISE = 0.625
"""KSampler's sigmas for `STEPS` steps scaled to start at the upscale stage's first sigma (0.625)."""
CELLS = 32
"""The videos' side (2 S, twice the model's trained range), as the quality benchmark's."""
TARGET = 0.10


@dataclass(frozen=True)
class Row:
    tool: str
    untiled: tuple[float, float]
    tdp: tuple[float, float]
    """(median seconds without the tool, with it)."""
    skipped: str = ""

    def speedup(self, pair: tuple[float, float]) -> float:
        return pair[0] / pair[1]

    @property
    def ratio(self) -> float:
        return self.speedup(self.tdp) / self.speedup(self.untiled)


def _setup() -> tuple[Any, list, list[torch.Tensor]]:
    base = Path(tempfile.mkdtemp(prefix="tdp_bench_speedups_"))
    comfy_runtime.start_script(base)
    comfy_runtime.quiet()
    import_pack()
    from ltx_tdp.bench.quality import data
    from ltx_tdp.bench.quality.config import BenchConfig
    from ltx_tdp.bench.quality.model import SHIPPED_CHECKPOINT, conditioning, load_model

    cfg = BenchConfig()
    videos = [data.video(cfg.train.data, cfg.cells, cfg.cells, cfg.video_seed + v)[None] for v in range(cfg.videos)]
    return load_model(SHIPPED_CHECKPOINT), conditioning(cfg.train.model), videos


def _sample(model: Any, cond: list, latent: torch.Tensor) -> float:
    t0 = time.perf_counter()
    comfy_runtime.run_node("KSampler", model=model, seed=7, steps=STEPS, cfg=1.0, sampler_name="euler",
                           scheduler="simple", positive=cond, negative=cond, latent_image={"samples": latent},
                           denoise=DENOISE)
    return time.perf_counter() - t0


def _tdp(model: Any) -> Any:
    from ltx_tdp.ltx.model import apply_tdp
    from ltx_tdp.tiling import AxisTiling, TileCountConfig

    return apply_tdp(model, TileCountConfig(AxisTiling(1, 0), AxisTiling(2, 5), AxisTiling(2, 5)))


class _Skips(logging.Handler):
    """The cache's own end-of-sampling line ("EasyCache - skipped N/M steps ..."), the last one seen."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " - skipped " in message:
            self.last = message.split(" - skipped ", 1)[1].split(" ", 1)[0]


def measure(tool: str, apply: Callable[[Any], Any], model: Any, cond: list, latents: list[torch.Tensor],
            runs: int) -> Row:
    """Per setting, the sum over `latents` of each one's median time, the settings taking turns, after one warm-up
    run of each (the compile: every latent has the same shape)."""
    settings = {"untiled": model, "untiled+": apply(model), "tdp": _tdp(model), "tdp+": apply(_tdp(model))}
    skips = _Skips()
    root = logging.getLogger()
    root.addHandler(skips)
    level = root.level
    root.setLevel(logging.INFO)  # the cache's line is INFO; ComfyUI's own chatter goes to the log too
    skipped: dict[str, list[str]] = {k: [] for k in settings}
    total = dict.fromkeys(settings, 0.0)
    try:
        for name, m in settings.items():
            log.info("%s: warm-up %s (%.1f s)", tool, name, _sample(m, cond, latents[0]))
        for latent in latents:
            times: dict[str, list[float]] = {k: [] for k in settings}
            for _ in range(runs):
                for name, m in settings.items():
                    _sample(m, cond, latent)  # untimed: the heap warm for this setting's sizes (module docstring)
                    skips.last = ""
                    times[name].append(_sample(m, cond, latent))
            for name in settings:
                total[name] += statistics.median(times[name])
                if skips.last:
                    skipped[name].append(skips.last.split("/")[0])
    finally:
        root.removeHandler(skips)
        root.setLevel(level)
    counts = "; ".join(f"{label} {', '.join(skipped[k])} of {STEPS}" for k, label in
                       (("untiled+", "untiled"), ("tdp+", "TDP")) if skipped[k])
    row = Row(tool, (total["untiled"], total["untiled+"]), (total["tdp"], total["tdp+"]), counts)
    log.info("%s: untiled %.2fx, TDP %.2fx, ratio %.3f (%s)", tool, row.speedup(row.untiled), row.speedup(row.tdp),
             row.ratio, counts or "-")
    return row


def markdown(rows: list[Row], runs: int, videos: int) -> str:
    import comfyui_version

    lines = [
        "# Speed-ups with the pack (bench/bench_speedups.py)",
        "",
        f"ComfyUI {comfyui_version.__version__}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, 1 torch thread. The quality benchmark's trained LTXV and its {videos} synthetic videos of "
        f"{CELLS} x {CELLS} latent cells (9 frames), KSampler euler/simple {STEPS} steps at denoise {DENOISE} (first "
        f"sigma 0.947 with this model's shift), cfg 1. Times: the sum over the videos of each video's median of "
        f"{runs} runs, the four settings taking turns, each timed run right after an untimed one of its setting, after a "
        "warm-up run of each (the compile). TDP: 2 x 2 tiles, "
        "overlap 5. Steps skipped: per video, as the cache logs them.",
        "",
        "| speed-up | untiled: without / with (s) | untiled speed-up | TDP 2x2: without / with (s) | TDP speed-up "
        "| TDP / untiled | within 10 % | steps skipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = "yes" if r.ratio >= 1 - TARGET else "**no**"
        lines.append(f"| {r.tool} | {r.untiled[0]:.2f} / {r.untiled[1]:.2f} | {r.speedup(r.untiled):.2f}x "
                     f"| {r.tdp[0]:.2f} / {r.tdp[1]:.2f} | {r.speedup(r.tdp):.2f}x | {r.ratio:.3f} | {ok} "
                     f"| {r.skipped or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    quick = os.environ.get("TDP_BENCH_QUICK") == "1"
    runs = 2 if quick else int(os.environ.get("TDP_BENCH_RUNS", "3"))
    torch.set_num_threads(1)
    model, cond, latents = _setup()  # KSampler adds the noise of its first sigma itself
    latents = latents[:1] if quick else latents
    cache = lambda m: comfy_runtime.run_node("EasyCache", model=m, reuse_threshold=0.2, start_percent=0.15,
                                             end_percent=0.95, verbose=False)[0]
    compiled = lambda m: comfy_runtime.run_node("TorchCompileModel", model=m, backend="inductor")[0]
    rows = [measure("EasyCache (defaults)", cache, model, cond, latents, runs),
            measure("TorchCompileModel (inductor)", compiled, model, cond, latents, runs)]
    text = markdown(rows, runs, len(latents))
    print(text)
    if not quick:
        RESULTS.write_text(text)
        log.info("wrote %s", RESULTS)


if __name__ == "__main__":
    main()
