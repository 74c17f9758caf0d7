"""Benchmark of the tiled VAE decode over this machine's devices (not a test): LTX TDP Tiled VAE Decode with
`device` `all` on 2 devices against `default` (1 device), the same VAE, latent and tiles, in one run.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_vae_decode_devices.py'

HARDWARE MOCK: a CPU machine has one torch device, so ComfyUI is told it has cpu and cpu:1
(ltx_tdp_devkit.core_multigpu.fake_devices); the VAE replica, ComfyUI's model management, its MultiGPUThreadPool
(one thread per extra device) and the pack's dispatch are real. One torch thread per device (the 1-device
baseline too): on a 2-core CPU the two devices are the two cores. Decoders: LTX-2's VideoVAE at its published
configuration (random weights, comfy.sd.VAE) and, on ComfyUI >= 0.32, LTX-2.5's diffusion decoder at the tests'
tiny configuration; `exact` quality, whole clips in time, the tiles side by side. Environment: TDP_BENCH_RUNS (timed
decodes per setting, default 3), TDP_BENCH_SIZE (`full`, default, estimated at about 3 minutes on 2 quiet cores; `tiny`: the
tests' tiny VAE, seconds). Results: bench/results/vae_decode_devices.md.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ltx_tdp_devkit import comfy_runtime, real_vae
from ltx_tdp_devkit.core_multigpu import fake_devices, has_core_multigpu, torch_threads

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
SIZES = {
    # name: (latent frames, height, width in cells, spatial tile px, quality) of the conv decoder; tiles split the width
    "full": (2, 4, 24, 192, "fast"),
    "tiny": (2, 4, 16, 128, "exact"),
}
DIFFUSION = {"full": (2, 4, 16, 128, "exact"), "tiny": (1, 2, 8, 128, "exact")}
"""The same for LTX-2.5's tiny diffusion decoder."""


def _vaes(size: str) -> list[tuple[str, object, int, tuple]]:
    """(name, comfy.sd.VAE, latent channels, its SIZES entry) of the decoders this ComfyUI builds."""
    from ltx_tdp_devkit import diffusion_vae, tiny_models

    if size == "tiny":
        out = [("tiny LTX VAE", real_vae.real_vae(tiny_models.VAE_CONFIG, seed=0), 128, SIZES[size])]
    else:
        out = [("LTX-2 VAE (published config)", real_vae.real_vae(real_vae.LTX2_VAE_CONFIG, seed=0), 128, SIZES[size])]
    if diffusion_vae.has_diffusion_vae():
        vae = diffusion_vae.load(seed=1)
        out.append(("LTX-2.5 diffusion VAE (tiny)", vae, int(vae.latent_channels), DIFFUSION[size]))
    return out


def _decoder(vae, x: torch.Tensor, tile: int, quality: str, devices: tuple) -> Callable[[], torch.Tensor]:
    from ltx_tdp.ltx.vae import DecodeSettings, decode_tiled

    settings = DecodeSettings(spatial_tile=tile, quality=quality)
    return lambda: decode_tiled(vae, x, settings, devices=devices)


def _timed(runs: dict, n: int) -> dict:
    """name -> (wall seconds of each of n timed runs, the last output); each setting warmed up once (the replica,
    ComfyUI's loads), then the settings take turns, so drift in the host's load hits all."""
    out = {name: run() for name, run in runs.items()}
    wall: dict = {name: [] for name in runs}
    for _ in range(n):
        for name, run in runs.items():
            start = time.perf_counter()
            out[name] = run()
            wall[name].append(time.perf_counter() - start)
    return {name: (wall[name], out[name]) for name in runs}


def run_all(size: str = "full", runs: int = 3) -> str:
    """The benchmark's report (markdown) at `size`, `runs` timed decodes per setting; written to RESULTS unless tiny."""
    begin, load_before = time.perf_counter(), os.getloadavg()
    sections = []
    with fake_devices(2) as devices, torch_threads(1), torch.inference_mode():
        for name, vae, channels, (frames, height, width, tile, quality) in _vaes(size):
            x = torch.randn(1, channels, frames, height, width, generator=torch.Generator().manual_seed(1))
            rows = _timed({"1 device": _decoder(vae, x, tile, quality, (devices[0],)),
                           "2 devices": _decoder(vae, x, tile, quality, tuple(devices))}, runs)
            sections.append((name, f"{' x '.join(map(str, x.shape[2:]))}, {tile} px tiles, {quality}", rows))
    text = _markdown(sections, size, runs, time.perf_counter() - begin, load_before, os.getloadavg())
    if size != "tiny":
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "vae_decode_devices.md").write_text(text)
    return text


def _markdown(sections: list, size: str, runs: int, seconds: float, before: tuple, after: tuple) -> str:
    lines = [
        "# The tiled VAE decode over this machine's devices: benchmark",
        "",
        f"`bench/bench_vae_decode_devices.py` (size `{size}`) on {platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, ComfyUI {comfy_runtime.comfyui_version()}, CPU, fp32, **1 torch thread per device** "
        f"(the 1-device baseline too). `decode_tiled`, whole clips in time, the tiles side by side in width; "
        f"median and best of {runs} decodes after a warm-up, the settings taking turns. The 2 devices are cpu and "
        "cpu:1 as ComfyUI is told it has them (a hardware mock of the device list; the VAE replica, ComfyUI's model "
        f"management, its thread pool and the dispatch are real). Total run time {seconds:.0f} s; load average "
        f"(1, 5, 15 min) {before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} before, {after[0]:.2f} / {after[1]:.2f}"
        f" / {after[2]:.2f} after (above ~0.3 other processes shared the cores: the speedups are understated).",
        "",
        "| decoder | latent (frames x height x width cells), tiles, quality | setting | s per decode (median) | s (best) | speedup (median) | speedup (best) | "
        "max abs diff vs 1 device |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, layout, rows in sections:
        base_times, base_out = rows["1 device"]
        for setting, (times, out) in rows.items():
            diff = "" if setting == "1 device" else f"{(out - base_out).abs().max().item():.1e}"
            lines.append(f"| {name} | {layout} | {setting} | {statistics.median(times):.2f} "
                         f"| {min(times):.2f} | {statistics.median(base_times) / statistics.median(times):.2f} | "
                         f"{min(base_times) / min(times):.2f} | {diff} |")
    lines += [
        "",
        "Each device decodes its contiguous share of the tiles on its own copy of the VAE; the other device's tiles "
        "land in system memory and are blended by the prompt's thread in tile order, so the frames equal one "
        "device's bit for bit (diff 0). LTX-2.5's diffusion decoder runs its whole-frame head once per device, so "
        "its speedup is below the conv decoder's.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    comfy_runtime.start_script(Path(tempfile.mkdtemp(prefix="tdp_bench_vae_devices_")))
    comfy_runtime.quiet()
    if not has_core_multigpu():
        raise SystemExit("this ComfyUI has no in-process MultiGPU (comfy/multigpu.py): use ComfyUI 0.24 or later")
    if not real_vae.builds_ltx2_vae():
        raise SystemExit("this ComfyUI cannot build the LTX-2 VAE: use ComfyUI >= 0.8")
    size = os.environ.get("TDP_BENCH_SIZE", "full")
    print(run_all(size, int(os.environ.get("TDP_BENCH_RUNS", "3"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
