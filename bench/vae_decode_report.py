"""The tiled VAE decode benchmark's report (bench/bench_vae_decode.py): its targets' verdicts, its plot and its
page, bench/results/vae_decode.md. A row is that script's `Row` (case, method, setting, CPU and wall seconds,
peak and output bytes, PSNR against VAEDecode)."""

from __future__ import annotations

import logging
import math
import os
import platform
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"

REAL_LATENT = (2, 4, 20)
"""Latent (frames, height, width) of the real-config LTX-2 runs: 9 frames of 128 x 640 px."""

log = logging.getLogger("ltx_tdp.bench")


def verdicts(rows: list) -> list[str]:
    """For each VAEDecodeTiled run: the fastest of ours with at least its PSNR, overall and among our tiled
    (320 px) runs; then ours at the node defaults against the untiled decode. Times are CPU seconds."""
    ours = [r for r in rows if r.method == "ours"]
    tiled = [r for r in ours if not r.setting.startswith("node defaults")]
    lines = []
    for theirs in (r for r in rows if r.method == "VAEDecodeTiled"):
        parts = []
        for label, pool in (("overall", ours), ("with 320 px tiles", tiled)):
            fast = min((r for r in pool if r.psnr >= theirs.psnr), key=lambda r: r.seconds, default=None)
            parts.append(f"{label}: {fast.setting}, {fmt_db(fast.psnr)} in {fast.seconds:.1f} s "
                         f"({'met' if fast.seconds <= theirs.seconds else 'NOT met'})" if fast else f"{label}: none")
        lines.append(f"* VAEDecodeTiled {theirs.setting} ({fmt_db(theirs.psnr)} in {theirs.seconds:.1f} s) — fastest "
                     f"of ours with at least its PSNR, " + "; ".join(parts))
    untiled = next(r for r in rows if r.method == "VAEDecode")
    default = next(r for r in ours if r.setting.startswith("node defaults"))
    lines.append(f"* ours at the node defaults: {fmt_db(default.psnr)} in {default.seconds / untiled.seconds:.2f}x "
                 "the untiled decode's CPU time (target <= 1.3x)")
    return lines


def fmt_db(value: float) -> str:
    return "inf dB (bit-identical)" if math.isinf(value) else f"{value:.1f} dB"


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:,.1f}"


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    real = [r for r in rows if r.case == "real-config LTX-2"]
    untiled = next(r for r in real if r.method == "VAEDecode")
    cap = 150.0
    fig, ax = plt.subplots(figsize=(8, 5))
    for method, marker, colour in (("ours", "o", "tab:blue"), ("VAEDecodeTiled", "s", "tab:orange")):
        pts = [r for r in real if r.method == method]
        ax.scatter([r.seconds for r in pts], [min(r.psnr, cap) for r in pts], marker=marker, color=colour,
                   label=method)
        for r in pts:
            ax.annotate(r.setting.split(",")[0], (r.seconds, min(r.psnr, cap)), fontsize=7,
                        xytext=(4, 2), textcoords="offset points")
    ax.axvline(untiled.seconds, color="grey", linestyle="--", label=f"VAEDecode (untiled) {untiled.seconds:.1f} s")
    ax.axhline(50, color="grey", linestyle=":", label="50 dB")
    ax.set_xlabel("CPU time (s, fp32)")
    ax.set_ylabel(f"PSNR vs untiled (dB; {cap:.0f} = identical)")
    ax.set_title(f"Real-config LTX-2 decoder, random weights: {REAL_LATENT[2] * 32} x {REAL_LATENT[1] * 32} x "
                 f"{8 * REAL_LATENT[0] - 7} frames")
    ax.legend(fontsize=8, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(rows: list, profile_lines: list[str], overhead_lines: list[str], version: str) -> None:
    lines = [
        "# Tiled VAE decode: time, PSNR and peak memory",
        "",
        f"ComfyUI {version}, torch {torch.__version__}, CPU ({platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} threads, shared with other jobs: times are the process's CPU seconds, wall "
        "time alongside), fp32. Produced by `bench/bench_vae_decode.py`; plot: `vae_decode.png`. PSNR against VAEDecode (frames in [0, 1]); peak = peak RSS above the RSS before "
        "the call (output included). Ours: overlap 0, whole clips in time unless said; VAEDecodeTiled: "
        "temporal_size 64, temporal_overlap 8 (its defaults) unless said.",
        "",
        f"The real-config LTX-2 decoder has random weights: it reaches 16 latent cells in space and 14 latent "
        f"frames in time, and with random weights an error at a tile's edge fades by about 10 dB per cell of "
        f"context; trained weights reach less far in effect. Latent {REAL_LATENT[2]} x {REAL_LATENT[1]} cells x "
        f"{REAL_LATENT[0]} latent frames.",
        "",
        "| case | method | setting | CPU time (s) | wall (s) | peak (MiB) | output (MiB) | PSNR vs VAEDecode (dB) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        q = "—" if r.method == "VAEDecode" else ("inf" if math.isinf(r.psnr) else f"{r.psnr:.1f}")
        lines.append(f"| {r.case} | {r.method} | {r.setting} | {r.seconds:.2f} | {r.wall:.2f} | {mib(r.peak)} | "
                     f"{mib(r.output)} | {q} |")
    lines += ["", "## Targets", "", *verdicts([r for r in rows if r.case == "real-config LTX-2"]), ""]
    tiny = [r for r in rows if r.case.startswith("tiny") and r.method == "ours"]
    if tiny:
        growth = ", ".join(f"{r.case.split(', ')[1]}: peak - output {mib(r.peak - r.output)} MiB" for r in tiny)
        lines += [f"* peak memory against the clip length (ours, tiny VAE, chunks of 48 frames, 1 cell of context): "
                  f"{growth}", ""]
    lines += [
        "## Profile (real-config LTX-2, 320 px tiles)",
        "",
        "| quality | total (s) | decoder calls (s) | crop, weights, blend, copies (s) | decoded / latent voxels |",
        "|---|---:|---:|---:|---:|",
        *profile_lines,
        "",
        "## Decoded latent voxels / latent voxels at 3840 x 2176 x 121 (whole clips in time)",
        "",
        "What each preset's context costs at 4K, from the tile plans (the decode time follows the decoded voxels):",
        "",
        *overhead_lines,
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "vae_decode.md"
    path.write_text("\n".join(lines))
    log.info("wrote %s\n%s", path, "\n".join(lines))
