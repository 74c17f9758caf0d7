"""Benchmark of TDP over ComfyUI's own MultiGPU (not a test): 2 devices in one process against 1, beside the
process group (2 ranks, the launcher's path), on the same model, latent and tiles, in one run.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_core_multigpu.py'

ComfyUI's in-process MultiGPU only runs while sampling (the guider hands the clones to the model calls), so the
timed unit is a KSampler run (euler, cfg 1, STEPS steps: one model call each) of the TDP-patched model; the
figure is per model call. HARDWARE MOCK: a CPU machine has one torch device, so ComfyUI is told it has cpu and
cpu:1 (ltx_tdp_devkit.core_multigpu.fake_devices); the deepclone, the thread pool (one thread per device) and
the dispatch are ComfyUI's and the pack's own. One torch thread per device (and per rank): on this 2-core CPU
the two devices are the two cores. Model, latent and tiles are bench_multigpu.py's (a 2-layer, 128-wide
LTXVModel, 4 x 40 x 40 latent, 2 x 2 tiles, overlap 4), large enough that compute, not Python, is timed.
Results: bench/results/core_multigpu.md. Environment: TDP_BENCH_RUNS (timed KSampler runs per setting, default 5).
"""

from __future__ import annotations

import logging
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

from bench_multigpu import BENCH_MODEL, CONTEXT_DIM, CONTEXT_TOKENS, LATENT, OVERLAP, TILES, _setup, _tiling
from ltx_tdp_devkit import comfy_runtime
from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, has_core_multigpu

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
STEPS = 4
DENOISE = 0.5


def _conditioning(seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, CONTEXT_TOKENS, CONTEXT_DIM, generator=gen),
             {"attention_mask": torch.ones(1, CONTEXT_TOKENS, dtype=torch.long), "frame_rate": 25.0}]]


def _sampler(model, latent: dict):
    def run() -> torch.Tensor:
        (out,) = comfy_runtime.run_node("KSampler", model=model, seed=5, steps=STEPS, cfg=1.0, sampler_name="euler",
                                        scheduler="simple", positive=_conditioning(1), negative=_conditioning(2),
                                        latent_image=latent, denoise=DENOISE)
        return out["samples"]

    return run


def _cpu_seconds() -> float:
    """CPU time of this process so far, every thread included (the group's worker process not)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(runs: dict, n: int) -> dict:
    """name -> (wall seconds per model call of each of n timed runs, CPU seconds per model call of each, the last
    output), every setting warmed up once (loads, the deepclone, the group's start) and then timed in turn, so drift
    in the host's load hits all."""
    out = {name: run() for name, run in runs.items()}
    wall: dict = {name: [] for name in runs}
    cpu: dict = {name: [] for name in runs}
    for _ in range(n):
        for name, run in runs.items():
            start, cpu_start = time.perf_counter(), _cpu_seconds()
            out[name] = run()
            wall[name].append((time.perf_counter() - start) / STEPS)
            cpu[name].append((_cpu_seconds() - cpu_start) / STEPS)
    return {name: (wall[name], cpu[name], out[name]) for name in runs}


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    runs = int(os.environ.get("TDP_BENCH_RUNS", "5"))
    begin, load_before = time.perf_counter(), os.getloadavg()
    model = _setup()
    comfy_runtime.quiet()
    if not has_core_multigpu():
        raise SystemExit("this ComfyUI has no in-process MultiGPU (comfy/multigpu.py): use ComfyUI 0.24 or later")
    from ltx_tdp.ltx.model import apply_tdp
    from ltx_tdp.multigpu.group import get_group, shutdown_all
    from ltx_tdp.multigpu.settings import GroupSettings

    latent = {"samples": torch.randn(1, 128, *LATENT, generator=torch.Generator().manual_seed(3))}
    group = get_group(GroupSettings(devices=("cpu", "cpu"), backend="gloo", timeout_s=120, threads=1))
    try:
        with fake_devices(2):
            rows = _timed({
                "1 device": _sampler(apply_tdp(model, _tiling()), latent),
                "2 devices, ComfyUI MultiGPU (threads)": _sampler(cfg_split(apply_tdp(model, _tiling()), 2), latent),
                "2 ranks, process group (gloo)": _sampler(apply_tdp(model, _tiling(), group=group), latent),
            }, runs)
    finally:
        shutdown_all()
    text = _markdown(rows, runs, time.perf_counter() - begin, load_before, os.getloadavg())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "core_multigpu.md").write_text(text)
    print(text)
    return 0


def _markdown(rows: dict, runs: int, seconds: float, before: tuple, after: tuple) -> str:
    import comfyui_version

    base_times, _, base_out = rows["1 device"]
    base = statistics.median(base_times)
    f, h, w = LATENT
    lines = [
        "# TDP over ComfyUI's MultiGPU: benchmark",
        "",
        f"`bench/bench_core_multigpu.py` on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"ComfyUI {comfyui_version.__version__}, CPU, fp32, **1 torch thread per device and per rank** (the "
        f"1-device baseline too). Model: LTXVModel built with ComfyUI's class, {BENCH_MODEL['num_layers']} layers, "
        f"{BENCH_MODEL['num_attention_heads']} heads x {BENCH_MODEL['attention_head_dim']}. Timed: KSampler runs "
        f"(euler, cfg 1, {STEPS} steps, denoise {DENOISE}) of the TDP-patched model on a {f}x{h}x{w} latent "
        f"({w * 32}x{h * 32} px x {(f - 1) * 8 + 1} frames), {TILES[0]}x{TILES[1]} tiles, overlap {OVERLAP}; per "
        f"model call = run time / {STEPS}; median and best of {runs} runs after a warm-up run, the settings taking "
        f"turns. The 2 devices are cpu and cpu:1 as ComfyUI is told it has them (a hardware mock of the device list; the deepclone, the "
        f"thread pool and the dispatch are real). Total run time {seconds:.0f} s; load average (1, 5, 15 min) "
        f"{before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} before, {after[0]:.2f} / {after[1]:.2f} / "
        f"{after[2]:.2f} after (above ~0.3 other processes shared the 2 cores: the speedups are understated).",
        "",
        "| setting | ms per model call (median) | ms (best) | speedup (median) | speedup (best) | CPU ms per call "
        "(this process, median) | max abs diff vs 1 device |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (times, cpu, out) in rows.items():
        med, best = statistics.median(times), min(times)
        diff = "" if name == "1 device" else f"{(out - base_out).abs().max().item():.1e}"
        lines.append(f"| {name} | {med * 1e3:.0f} | {best * 1e3:.0f} | {base / med:.2f} | {min(base_times) / best:.2f} "
                     f"| {statistics.median(cpu) * 1e3:.0f} | {diff} |")
    lines += [
        "",
        "Under load the comparison favours the group: with the kernel's autogroup scheduling (on here: "
        f"`sched_autogroup_enabled` = {_autogroup()}) each session gets a fair share of the cores, and the "
        "launcher starts its worker in a session of its own, while the two devices of the in-process path are "
        "two threads of one process sharing one session's share. On a quiet machine both get both cores.",
        "",
        "CPU ms per call counts every thread of this process (not the group's worker): for the in-process path it "
        "is what both devices spend, so against the 1-device figure it shows the path's own overhead whatever the "
        "load.",
        "",
        "The in-process path sends nothing: each device computes its tiles from the same tensors and the partial "
        "sums are added in float64 on the model's device, so it equals one device bit for bit (diff 0). The "
        "process group broadcasts the call's inputs and all_reduces the sums over gloo every call.",
        "",
    ]
    return "\n".join(lines)


def _autogroup() -> str:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
