"""Benchmark of both stages over ComfyUI's MultiGPU (not a test): 2 devices against 1, in one run.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/sequence/speed.py'

A two-stage run as the official LTX-2.5 template makes it, on one model: stage 1 (KSampler, euler, cfg 1,
STAGE1_STEPS steps, denoise 1) on the half-size latent, the latent upscaled x2 in space (trilinear: the bench's
stand-in for the latent upsampler), stage 2 (KSampler, euler, cfg 1, STAGE2_STEPS steps, denoise 0.4) on the
full-size latent. 1 device: stage 1 as loaded, stage 2 through the TDP patcher (the same tiles, one after
another). 2 devices: stage 1 through LTX Sequence Parallel, stage 2 through the TDP patcher, both on ComfyUI's
MultiGPU CFG Split clones (`create_multigpu_deepclones`, 2 devices). Timed per setting: stage 1 (its time per model
call is the stage-1 model-call figure), stage 2, and the whole run; the max abs difference against 1 device is
stage 1's output and the whole run's.

HARDWARE MOCK: a CPU machine has one torch device, so ComfyUI is told it has cpu and cpu:1
(`ltx_tdp_devkit.core_multigpu.fake_devices`); the deepclones, the thread pool (one thread per device), the
exchange and the dispatch are ComfyUI's and the pack's own. One torch thread per device (the 1-device baseline
too): on this 2-core CPU the two devices are the two cores. The model (an LTXVModel built with ComfyUI's class,
BENCH.model) is wide enough and the sequence long enough that attention, not Python, is timed.
Results: bench/results/sequence_parallel.md. Environment: TDP_BENCH_RUNS (timed runs per setting, default 3).
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"
CONTEXT_TOKENS, CONTEXT_DIM = 8, 16
"""The text context fed to both stages (the test kit's LTXV takes 16-wide captions)."""


@dataclass(frozen=True)
class Sizes:
    """What one benchmark run builds and samples (latent cells: frames, height, width of stage 1)."""

    model: dict = field(default_factory=lambda: dict(num_layers=2, num_attention_heads=4, attention_head_dim=32,
                                                     cross_attention_dim=128))
    stage1_latent: tuple[int, int, int] = (4, 32, 32)
    stage1_steps: int = 8
    stage2_steps: int = 3
    stage2_denoise: float = 0.4
    tiles: tuple[int, int] = (2, 2)
    overlap: int = 4


BENCH = Sizes()
"""Stage 1 on 4 x 32 x 32 cells (4096 tokens; 1024 x 1024 px x 25 frames), stage 2 on 4 x 64 x 64 in 2 x 2 tiles:
stage 1 is about a third of the run's transformer work, as at 4K in the official template."""
SMOKE = Sizes(model={}, stage1_latent=(2, 4, 6), stage1_steps=2, stage2_steps=1, overlap=2)
"""The smallest run (the test kit's tiny LTXV, its own config), for the test of this script."""


def _conditioning(seed: int, dim: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, CONTEXT_TOKENS, dim, generator=gen),
             {"attention_mask": torch.ones(1, CONTEXT_TOKENS, dtype=torch.long), "frame_rate": 25.0}]]


def _ksampler(model, latent: torch.Tensor, steps: int, denoise: float, seed: int, dim: int) -> torch.Tensor:
    from ltx_tdp_devkit.comfy_runtime import run_node

    (out,) = run_node("KSampler", model=model, seed=seed, steps=steps, cfg=1.0, sampler_name="euler",
                      scheduler="simple", positive=_conditioning(1, dim), negative=_conditioning(2, dim),
                      latent_image={"samples": latent}, denoise=denoise)
    return out["samples"]


@dataclass
class Times:
    """Seconds of each timed run of one setting, and the last run's outputs."""

    stage1: list[float] = field(default_factory=list)
    stage2: list[float] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"stage1": [], "stage2": [], "whole": []})
    """CPU seconds of this process (every thread) per stage and run: against 1 device, the path's own overhead."""
    outputs: tuple[torch.Tensor, torch.Tensor] | None = None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _two_stage(stage1_model, stage2_model, sizes: Sizes, channels: int, dim: int, times: Times) -> None:
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    first = _ksampler(stage1_model, torch.zeros(1, channels, *sizes.stage1_latent), sizes.stage1_steps, 1.0, 5, dim)
    middle, cpu_middle = time.perf_counter(), _cpu_seconds()
    up = torch.nn.functional.interpolate(first, scale_factor=(1, 2, 2), mode="trilinear", align_corners=False)
    second = _ksampler(stage2_model, up, sizes.stage2_steps, sizes.stage2_denoise, 6, dim)
    end, cpu_end = time.perf_counter(), _cpu_seconds()
    times.stage1.append(middle - start)
    times.stage2.append(end - middle)
    times.whole.append(end - start)
    for key, seconds in (("stage1", cpu_middle - cpu_start), ("stage2", cpu_end - cpu_middle),
                         ("whole", cpu_end - cpu_start)):
        times.cpu[key].append(seconds)
    times.outputs = (first, second)


def measure(model, sizes: Sizes, runs: int) -> dict[str, Times]:
    """Both settings, each warmed up once (loads, deepclones) and then timed `runs` times, taking turns so drift
    in the host's load hits both. One torch thread per device while it runs."""
    from ltx_tdp.ltx.model import apply_tdp
    from ltx_tdp.ltx.sequence import apply_sequence_parallel
    from ltx_tdp.tiling import AxisTiling, TileCountConfig
    from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, torch_threads

    channels, dim = model.model.diffusion_model.in_channels, CONTEXT_DIM
    tiling = TileCountConfig(height=AxisTiling(sizes.tiles[0], sizes.overlap),
                             width=AxisTiling(sizes.tiles[1], sizes.overlap))
    with torch_threads(1), fake_devices(2):
        settings = {
            "1 device": (model, apply_tdp(model, tiling)),
            "2 devices": (cfg_split(apply_sequence_parallel(model), 2), cfg_split(apply_tdp(model, tiling), 2)),
        }
        times = {name: Times() for name in settings}
        for name, (one, two) in settings.items():
            _two_stage(one, two, sizes, channels, dim, Times())
        for _ in range(runs):
            for name, (one, two) in settings.items():
                _two_stage(one, two, sizes, channels, dim, times[name])
    return times


def markdown(times: dict[str, Times], sizes: Sizes, model_config: dict, seconds: float, load: tuple) -> str:
    """The results page: per stage and for the whole run, 1 device against 2, speedups and max abs differences."""
    import platform

    import comfyui_version

    one, two = times["1 device"], times["2 devices"]
    f, h, w = sizes.stage1_latent
    diff = [float((a - b).abs().max()) for a, b in zip(one.outputs, two.outputs)]
    rows = [("stage-1 model call, LTX Sequence Parallel", "stage1", sizes.stage1_steps, diff[0]),
            ("stage-2 model call, TDP tiles", "stage2", sizes.stage2_steps, None),
            ("whole two-stage run", "whole", 1, diff[1])]
    cfg = ", ".join(f"{k} {v}" for k, v in model_config.items())
    lines = [
        "# Both stages over ComfyUI's MultiGPU: benchmark", "",
        f"`bench/sequence/speed.py` on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"ComfyUI {comfyui_version.__version__}, CPU, fp32, **1 torch thread per device** (the 1-device baseline "
        f"too). Model: LTXVModel built with ComfyUI's class ({cfg}). Stage 1: KSampler, euler, cfg 1, "
        f"{sizes.stage1_steps} steps on {f}x{h}x{w} latent cells ({f * h * w} tokens); latent upscaled x2; stage 2: "
        f"{sizes.stage2_steps} steps, denoise {sizes.stage2_denoise}, on {f}x{2 * h}x{2 * w} in "
        f"{sizes.tiles[0]}x{sizes.tiles[1]} tiles, overlap {sizes.overlap}. 2 devices: cpu and cpu:1 as ComfyUI is "
        f"told it has them (a hardware mock of the device list; deepclones, thread pool, exchange and dispatch "
        f"real); stage 1 through LTX Sequence Parallel, stage 2 through the TDP patcher, both with MultiGPU CFG "
        f"Split. Median and best of {len(one.whole)} runs after a warm-up run, the settings taking turns. Total "
        f"{seconds:.0f} s; load average (1, 5, 15 min) {load[0][0]:.2f} / {load[0][1]:.2f} / {load[0][2]:.2f} "
        f"before, {load[1][0]:.2f} / {load[1][1]:.2f} / {load[1][2]:.2f} after (above ~0.3 other processes shared "
        f"the 2 cores: the speedups are understated).", "",
        "| what | 1 device, ms (median) | 2 devices, ms (median) | speedup (median) | speedup (best) | "
        "max abs diff vs 1 device | CPU ms, 1 device / 2 devices (this process, median) |", "|---|---|---|---|---|---|---|"]
    for label, key, per, d in rows:
        a, b = getattr(one, key), getattr(two, key)
        lines.append(f"| {label} | {statistics.median(a) / per * 1e3:.0f} | {statistics.median(b) / per * 1e3:.0f} | "
                     f"{statistics.median(a) / statistics.median(b):.2f} | {min(a) / min(b):.2f} | "
                     f"{'' if d is None else f'{d:.1e}'} | {statistics.median(one.cpu[key]) / per * 1e3:.0f} / "
                     f"{statistics.median(two.cpu[key]) / per * 1e3:.0f} |")
    lines += ["", "CPU ms count every thread of this process: 2 devices' CPU time against 1 device's is the "
              "sequence path's and the tile path's own overhead whatever the load; under load the wall times "
              "understate the speedup (the two device threads share what the process gets).", "",
              "Model-call figures are a stage's KSampler time over its steps (one model call a step at cfg 1). "
              "Each device computes its own query rows against every key, in one device's key order, so stage 1 "
              "can differ from one device only by fp32 rounding (products over fewer rows may be blocked "
              "otherwise); stage-2 tiles equal one device bit for bit on the same input, so the whole run's "
              "difference is stage 1's carried through stage 2.", ""]
    return "\n".join(lines)


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    from ltx_tdp_devkit import comfy_runtime, tiny_models

    runs = int(os.environ.get("TDP_BENCH_RUNS", "3"))
    begin, load_before = time.perf_counter(), os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="ltx-tdp-bench-sequence."))
    comfy_runtime.start_script(base)
    tiny_models.build_ltxv(base / "models" / "diffusion_models" / "bench_sequence.safetensors", **BENCH.model)
    import folder_paths

    folder_paths.filename_list_cache.clear()
    (model,) = comfy_runtime.run_node("UNETLoader", unet_name="bench_sequence.safetensors", weight_dtype="default")
    comfy_runtime.quiet()
    # Stage 2's first sigma (denoise 0.4 on LTXV's shifted schedule: 0.889) is above the patcher's drift warning;
    # the timing does not care, and the warning would repeat at every run.
    logging.getLogger("ltx_tdp.ltx.model.patch").setLevel(logging.ERROR)
    from ltx_tdp_devkit.core_multigpu import has_core_multigpu

    if not has_core_multigpu():
        raise SystemExit("this ComfyUI has no in-process MultiGPU (comfy/multigpu.py): use ComfyUI 0.24 or later")
    times = measure(model, BENCH, runs)
    text = markdown(times, BENCH, BENCH.model, time.perf_counter() - begin, (load_before, os.getloadavg()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sequence_parallel.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
