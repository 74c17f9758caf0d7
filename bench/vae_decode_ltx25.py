"""Benchmark of the tiled decode of LTX-2.5's diffusion video decoder (not a test): time against PSNR, ours at
several contexts against ComfyUI's VAEDecodeTiled at the LTX-2.5 templates' settings and at others, both
against the untiled VAEDecode. Every time is the median of REPEATS runs.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/vae_decode_ltx25.py'

In-process on a real ComfyUI (CPU, fp32): ComfyUI's CausalDiffusionVAE at its published configuration with
random weights (tests/ltx_tdp_devkit/diffusion_vae.py), loaded by comfy.sd.VAE, on the largest latent this
2-core CPU decodes untiled in a few seconds; and the tests' tiny one. bench/bench_vae_decode.py runs this too.
Results: bench/results/vae_decode_ltx25.md and .png.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
from ltx_tdp_devkit import comfy_runtime, diffusion_vae  # noqa: E402

log = logging.getLogger("ltx_tdp.bench")

REPEATS = 3
TEMPLATE = dict(tile_size=512, overlap=64, temporal_size=64, temporal_overlap=16)
"""VAEDecodeTiled as ComfyUI's LTX-2.5 templates (video_ltx2_5_t2v / i2v / flf2v) set it."""

CASES = {
    # case: (config builder, seed, latent (frames, height, width), our tile px, VAEDecodeTiled settings)
    "published config": (diffusion_vae.published_config, 0, (2, 2, 24), 256,
                         [TEMPLATE, dict(tile_size=256, overlap=64, temporal_size=64, temporal_overlap=16),
                          dict(tile_size=384, overlap=128, temporal_size=64, temporal_overlap=16)]),
    "tiny": (diffusion_vae.tiny_config, 1, (5, 4, 16), 128,
             [TEMPLATE, dict(tile_size=128, overlap=32, temporal_size=32, temporal_overlap=8)]),
}
OURS = [("exact", 0), ("fast", 0), ("custom", 2), ("custom", 1), ("custom", 0)]


@dataclass(frozen=True)
class Row:
    case: str
    method: str
    setting: str
    seconds: float
    wall: float
    psnr: float


def psnr(got: torch.Tensor, want: torch.Tensor) -> float:
    mse = torch.mean((got.double() - want.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def timed(node, **inputs) -> tuple[torch.Tensor, float, float]:
    """(result, median CPU seconds, median wall seconds) over REPEATS runs."""
    cpu, wall = [], []
    for _ in range(REPEATS):
        start, c0 = time.perf_counter(), time.process_time()
        (out,) = comfy_runtime.run_node(node, **inputs)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - start)
    return out, statistics.median(cpu), statistics.median(wall)


def case_rows(case: str, TiledVAEDecodeNode) -> list[Row]:
    build, seed, shape, tile, comfy_settings = CASES[case]
    vae = diffusion_vae.load(build(), seed=seed)
    x = torch.randn(1, 128, *shape, generator=torch.Generator().manual_seed(1))
    size = f"{shape[2] * 32} x {shape[1] * 32} x {8 * shape[0] - 7}"
    label = f"{case}, {size}"
    comfy_runtime.run_node("VAEDecode", vae=vae, samples={"samples": x[..., :1, :1]})  # warm up
    want, sec, wall = timed("VAEDecode", vae=vae, samples={"samples": x})
    rows = [Row(label, "VAEDecode", "untiled", sec, wall, math.inf)]
    got, sec, wall = timed(TiledVAEDecodeNode, vae=vae, samples={"samples": x})
    rows.append(Row(label, "ours", "node defaults (exact)", sec, wall, psnr(got, want)))
    for quality, cells in OURS:
        name = quality + (f" {cells}" if quality == "custom" else "") + f", {tile} px"
        got, sec, wall = timed(TiledVAEDecodeNode, vae=vae, samples={"samples": x}, spatial_tile=tile,
                               temporal_tile=16, quality=quality, context_cells=cells)
        rows.append(Row(label, "ours", name + ", 16 frames", sec, wall, psnr(got, want)))
    for settings in comfy_settings:
        name = (f"{settings['tile_size']} px / {settings['overlap']}, {settings['temporal_size']} / "
                f"{settings['temporal_overlap']} frames" + (" (templates)" if settings == TEMPLATE else ""))
        got, sec, wall = timed("VAEDecodeTiled", vae=vae, samples={"samples": x}, **settings)
        rows.append(Row(label, "VAEDecodeTiled", name, sec, wall, psnr(got, want)))
    for r in rows:
        log.info("%s | %s %s: %.2f CPU s, %.1f dB", r.case, r.method, r.setting, r.seconds, r.psnr)
    return rows


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r.case for r in rows}, key=lambda c: not c.startswith("published"))
    cap = 150.0
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.5))
    for ax, case in zip(axes if len(cases) > 1 else [axes], cases):
        mine = [r for r in rows if r.case == case]
        untiled = next(r for r in mine if r.method == "VAEDecode")
        for method, marker, colour in (("ours", "o", "tab:blue"), ("VAEDecodeTiled", "s", "tab:orange")):
            pts = [r for r in mine if r.method == method]
            ax.scatter([r.seconds for r in pts], [min(r.psnr, cap) for r in pts], marker=marker, color=colour,
                       label=method)
            for r in pts:
                ax.annotate(r.setting.split(",")[0], (r.seconds, min(r.psnr, cap)), fontsize=7, xytext=(4, 2),
                            textcoords="offset points")
        ax.axvline(untiled.seconds, color="grey", linestyle="--", label=f"VAEDecode {untiled.seconds:.1f} s")
        ax.set_xlabel(f"CPU time (s, fp32, median of {REPEATS})")
        ax.set_ylabel(f"PSNR vs untiled (dB; {cap:.0f} = within fp32 rounding or identical)")
        ax.set_title(f"LTX-2.5 diffusion decoder, random weights: {case}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(rows: list[Row], version: str) -> None:
    lines = [
        "# LTX-2.5 diffusion video decoder: tiled decode time against PSNR",
        "",
        f"ComfyUI {version}, torch {torch.__version__}, CPU ({platform.machine()}, {os.cpu_count()} cores, shared "
        f"with other jobs), fp32, random weights. Produced by `bench/vae_decode_ltx25.py`; plot: "
        f"`vae_decode_ltx25.png`. Times: CPU seconds of the process, median of {REPEATS} runs (wall alongside). "
        "PSNR against VAEDecode (frames in [0, 1]; inf: identical). Ours with 16-frame temporal chunks unless "
        "'node defaults'. VAEDecodeTiled's tiles each draw their own seed-0 noise and treat every chunk as the "
        "clip's first and last, so it cannot be exact.",
        "",
        "| case | method | setting | CPU time (s) | wall (s) | PSNR vs VAEDecode (dB) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        q = "—" if r.method == "VAEDecode" else ("inf" if math.isinf(r.psnr) else f"{r.psnr:.1f}")
        lines.append(f"| {r.case} | {r.method} | {r.setting} | {r.seconds:.2f} | {r.wall:.2f} | {q} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "vae_decode_ltx25.md"
    path.write_text("\n".join(lines) + "\n")
    log.info("wrote %s", path)


def run_all() -> list[Row]:
    """Every case, the report and the plot (ComfyUI already started)."""
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    rows = []
    with torch.inference_mode():
        for case in CASES:
            rows += case_rows(case, TiledVAEDecodeNode)
    plot(rows, RESULTS / "vae_decode_ltx25.png")
    write_report(rows, comfy_runtime.comfyui_version())
    return rows


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    comfy_runtime.start_script(Path(tempfile.mkdtemp(prefix="tdp_bench_ltx25_")))
    comfy_runtime.quiet()
    log.setLevel(logging.INFO)
    if not diffusion_vae.has_diffusion_vae():
        sys.exit("this ComfyUI has no LTX-2.5 diffusion VAE: run with COMFYUI_SRC pointing at ComfyUI >= 0.32")
    run_all()


if __name__ == "__main__":
    main()
