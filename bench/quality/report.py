"""Tables (bench/results/quality.md, quality.json) and figures (quality_*.png) of a quality run."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path

import torch

from .config import BenchConfig, Case
from .methods import LABELS, METHODS
from .render import draw_borders, pyplot, to_rgb
from .sweep import Results, borders_of, mean_over_videos
from .train import Trained

FIGURES = ("quality_loss.png", "quality_grid.png", "quality_overlap.png", "quality_sigma.png", "quality_steps.png")


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if math.isinf(x):
        return "∞ (same)"
    return f"{x:.{digits}f}"


def summary(cfg: BenchConfig, results: Results) -> dict:
    """Per case and method, the means over the videos of every figure (what the tables and docs/benchmarks.md show)."""
    out = {}
    for case in cfg.cases():
        out[case.label()] = {
            "reference_seam": results.reference_seam.get(case),
            **{m: {a: mean_over_videos(results.rows, case, m, a)
                   for a in ("psnr", "psnr_band", "psnr_interior", "seam", "psnr_vs_full", "psnr_band_vs_full",
                             "disagreement")} for m in METHODS},
        }
    return out


def _case_table(cfg: BenchConfig, results: Results, case: Case) -> list[str]:
    lines = ["| method | PSNR (dB) | border band PSNR | interior PSNR | seam score | PSNR vs (a) | band PSNR vs (a) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for m in METHODS:
        get = lambda a: mean_over_videos(results.rows, case, m, a)  # noqa: E731
        lines.append(f"| {LABELS[m]} | {_f(get('psnr'))} | {_f(get('psnr_band'))} | {_f(get('psnr_interior'))} | "
                     f"{_f(get('seam'), 3)} | {_f(get('psnr_vs_full'))} | {_f(get('psnr_band_vs_full'))} |")
    lines.append(f"| ground truth (reference) | | | | {_f(results.reference_seam.get(case), 3)} | | |")
    return lines


def _sweep_table(cfg: BenchConfig, results: Results, cases: list[Case], axis: str, value) -> list[str]:
    head = "| " + axis + " | " + " | ".join(f"{LABELS[m].split(')')[0]})  band PSNR / seam" for m in METHODS) + \
        " | (d) tile drift | GT seam |"
    lines = [head, "|---" + "|---:" * (len(METHODS) + 2) + "|"]
    for case in cases:
        cells = []
        for m in METHODS:
            cells.append(f"{_f(mean_over_videos(results.rows, case, m, 'psnr_band'))} / "
                         f"{_f(mean_over_videos(results.rows, case, m, 'seam'), 3)}")
        drift = mean_over_videos(results.rows, case, "blend_at_end", "disagreement")
        lines.append(f"| {value(case)} | " + " | ".join(cells) + f" | {_f(drift, 3)} | "
                     f"{_f(results.reference_seam.get(case), 3)} |")
    return lines


def sweeps(cfg: BenchConfig) -> dict[str, list[Case]]:
    """The cases of each one-axis sweep around the default case, in order of the swept value."""
    d = cfg.default
    same = lambda c, *axes: all(getattr(c, a) == getattr(d, a) for a in axes)  # noqa: E731
    cases = cfg.cases()
    return {
        "overlap": sorted((c for c in cases if same(c, "tiles", "first_sigma", "steps")), key=lambda c: c.overlap),
        "tiling": [c for c in cases if same(c, "overlap", "first_sigma", "steps")],
        "first sigma": sorted((c for c in cases if same(c, "tiles", "overlap", "steps")), key=lambda c: c.first_sigma),
        "steps": sorted((c for c in cases if same(c, "tiles", "overlap", "first_sigma")), key=lambda c: c.steps),
    }


def write(cfg: BenchConfig, trained: Trained, results: Results, out: Path, comfy_version: str) -> None:
    """Write quality.md, quality.json and the figures into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    t, m = cfg.train, cfg.train.model
    tail = trained.losses[-100:]
    lines = [
        "# Quality benchmark: what TDP's per-step blend buys",
        "",
        "`bench/quality/run.py` (see docs/benchmarks.md, *Quality benchmark*). ComfyUI "
        f"{comfy_version}, CPU ({platform.machine()}), torch {torch.__version__}.",
        "",
        "## The model",
        "",
        f"ComfyUI's `LTXVModel`, {m.num_layers} layers, {m.heads} heads x {m.head_dim} = {m.heads * m.head_dim} wide, "
        f"128 latent channels; RoPE range `[20, {m.max_cells * 32}, {m.max_cells * 32}]` px = S = {m.max_cells} cells. "
        f"Trained {t.steps} steps, batch {t.batch}, crops of {t.min_crop}..{m.max_cells} cells x {t.data.frames} latent "
        f"frames (positions from 0), rectified flow through ComfyUI's model sampling, in {trained.seconds:.0f} s "
        f"({'from the cache' if trained.from_cache else 'this run'}); last 100 steps' mean loss {sum(tail) / len(tail):.4f}. "
        "Loss curve: `quality_loss.png`.",
        "",
        "Held-out x0 MSE (single model call at each sigma; trivial predictors on the same S x S videos):",
        "",
        "| sigma | model, S x S | model, 2S x 2S full frame | predict 0 | predict x_t | best scale of x_t | model beats all trivial |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in trained.holdout:
        best = min(row["zero"], row["input"], row["scaled input"])
        verdict = "yes" if row["model"] < best else "NO"
        if row["sigma"] >= 1.0:  # x_t is pure noise: the data mean is the best any predictor can do
            verdict += " (pure noise: nothing can beat predicting the mean)"
        lines.append(f"| {row['sigma']:g} | {row['model']:.4f} | {row['model at 2S']:.4f} | {row['zero']:.4f} | "
                     f"{row['input']:.4f} | {row['scaled input']:.4f} | {verdict} |")
    d = cfg.default
    lines += [
        "",
        f"## The comparison ({cfg.cells} x {cfg.cells} cells = 2S, {t.data.frames} latent frames, {cfg.videos} videos)",
        "",
        "Each ground-truth video is noised by ComfyUI's sampler to the first sigma (one fixed noise field per video, "
        "shared by every method) and refined with euler along the stage's sigmas (upstream's `0.625, 0.4, 0` scaled "
        "to the first sigma). PSNR: peak = the ground truth's range. Border band: cells within "
        f"{cfg.band} of a tile edge (of the case's tiles and of the cut without overlap). Seam score: mean |gradient| "
        "across the method's tile edges over mean |gradient| elsewhere (ground truth's own value in the last row). "
        "*vs (a)*: the same figures against the untiled refine instead of the ground truth. *tile drift*: RMS "
        "difference of neighbouring tiles in their overlaps when refined alone (d), over the ground truth's RMS.",
        "",
        f"### Default case: {d.label()} (sigmas {', '.join(f'{s:g}' for s in d.sigmas)})",
        "",
        *_case_table(cfg, results, d),
        "",
        "Picture: `quality_grid.png`.",
    ]
    if results.example:
        ex = results.example
        diffs = ", ".join(f"{LABELS[m]} {float((ex[m] - ex['tdp']).abs().max()):.2e}"
                          for m in METHODS if m != "tdp")
        lines += ["", f"Largest |difference| from (b) on video 0 of this case: {diffs}."]
    for name, cases in sweeps(cfg).items():
        value = {"overlap": lambda c: c.overlap, "tiling": lambda c: f"{c.tiles[0]}x{c.tiles[1]}",
                 "first sigma": lambda c: f"{c.first_sigma:g}", "steps": lambda c: c.steps}[name]
        lines += ["", f"### Sweep: {name}", "", *_sweep_table(cfg, results, cases, name, value)]
    threshold, drift_lines = drift_onset(cfg, results)
    lines += ["", "### Where tiles drift apart (first-sigma sweep, default tiling)", "",
              f"Drifted: tiles refined on their own (d) differ in their overlaps by more than "
              f"{cfg.drift_tolerance:g} of the ground truth's RMS. Onset (interpolated, rounded down): "
              f"**{threshold:.2f}**, the patcher's `DRIFT_WARNING_SIGMA`.", "", *drift_lines]
    lines += ["", *verdicts(cfg, results)]
    (out / "quality.md").write_text("\n".join(lines) + "\n")
    (out / "quality.json").write_text(json.dumps({"summary": summary(cfg, results),
                                                  "holdout": list(trained.holdout),
                                                  "drift_warning_sigma": threshold,
                                                  "training_seconds": trained.seconds}, indent=1, default=str))
    plot_loss(trained, out / FIGURES[0])
    plot_grid(cfg, results, out / FIGURES[1])
    plot_sweeps(cfg, results, out / FIGURES[2], out / FIGURES[3], out / FIGURES[4])


SEAM_TIE = 0.005
PSNR_TIE_DB = 0.05


def _verdict(diff: float, tie: float) -> str:
    """`diff` > 0 is in (b)'s favour; within `tie` of zero is a tie."""
    return "tie" if abs(diff) <= tie else ("holds" if diff > 0 else "FAILS")


def verdicts(cfg: BenchConfig, results: Results) -> list[str]:
    """The issue's hypotheses, each checked on the default case with the numbers that decide it.

    Ties: seam scores within 0.005 of each other, PSNRs within 0.05 dB.
    """
    d = cfg.default
    get = lambda m, a: mean_over_videos(results.rows, d, m, a)  # noqa: E731
    lines = [f"## Hypotheses (default case; tie: seam within {SEAM_TIE}, PSNR within {PSNR_TIE_DB} dB)", ""]
    for other in ("tdp_global_pos", "blend_at_end", "no_overlap"):
        seam = _verdict(abs(get(other, "seam") - 1) - abs(get("tdp", "seam") - 1), SEAM_TIE)
        band = _verdict(get("tdp", "psnr_band") - get(other, "psnr_band"), PSNR_TIE_DB)
        lines.append(f"* (b) beats {LABELS[other]}: seam {get('tdp', 'seam'):.3f} vs {get(other, 'seam'):.3f} "
                     f"({seam}), border band PSNR {get('tdp', 'psnr_band'):.2f} vs {get(other, 'psnr_band'):.2f} dB "
                     f"({band}).")
    win = _verdict(get("tdp", "psnr") - get("full", "psnr"), PSNR_TIE_DB)
    lines.append(f"* (b) beats (a), the full frame out of range: PSNR {get('tdp', 'psnr'):.2f} vs "
                 f"{get('full', 'psnr'):.2f} dB ({win}).")
    return lines


def drift_onset(cfg: BenchConfig, results: Results) -> tuple[float, list[str]]:
    """The first sigma at which tiles refined on their own (d) drift apart, and the table behind it.

    Drift at a sigma: neighbouring tiles differ in their overlaps by more than `cfg.drift_tolerance` of the
    ground truth's RMS. The onset is where that measure first crosses the tolerance, interpolated linearly
    between swept sigmas and rounded down to 0.01 (the lowest swept sigma if it already drifts there, the
    highest if none does). The table also shows what the per-step blend (b) makes of it: its seam score
    over the untiled refine's at the same borders, and its interior PSNR minus its border band PSNR.
    """
    cases = sweeps(cfg)["first sigma"]
    lines = ["| first sigma | (d) tile drift | drifted | (b) seam - (a) seam | (b) interior - band PSNR (dB) |",
             "|---:|---:|---|---:|---:|"]
    points = []
    for case in cases:
        get = lambda m, a: mean_over_videos(results.rows, case, m, a)  # noqa: E731
        drift = get("blend_at_end", "disagreement")
        points.append((case.first_sigma, drift))
        lines.append(f"| {case.first_sigma:g} | {drift:.3f} | {'yes' if drift > cfg.drift_tolerance else 'no'} | "
                     f"{get('tdp', 'seam') - get('full', 'seam'):+.3f} | "
                     f"{get('tdp', 'psnr_interior') - get('tdp', 'psnr_band'):+.2f} |")
    onset = points[-1][0]
    for i, (sigma, drift) in enumerate(points):
        if drift > cfg.drift_tolerance:
            if i == 0:
                onset = sigma
            else:
                s0, d0 = points[i - 1]
                onset = s0 + (sigma - s0) * (cfg.drift_tolerance - d0) / (drift - d0)
            break
    return math.floor(onset * 100 + 1e-9) / 100, lines


def plot_loss(trained: Trained, path: Path) -> None:
    """The loss of every training step and its running mean, log scale."""
    plt = pyplot()
    losses = torch.tensor(trained.losses)
    k = max(1, min(50, len(losses) // 10))
    smooth = torch.nn.functional.avg_pool1d(losses[None, None], k, 1)[0, 0] if len(losses) >= k else losses
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(losses, alpha=0.3, lw=0.7, label="step")
    ax.plot(range(k - 1, k - 1 + len(smooth)), smooth, lw=1.5, label=f"mean of {k}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("velocity MSE")
    ax.set_title("Training loss (rectified flow)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_grid(cfg: BenchConfig, results: Results, path: Path) -> None:
    """Ground truth, noisy input and every method's output (top), |error| maps (bottom), tile edges drawn."""
    if not results.example:
        return
    plt = pyplot()
    ex = results.example
    gt = ex["ground truth"]
    n = cfg.cells
    d = cfg.default
    cols = ["ground truth", *METHODS]
    errs = {m: (ex[m] - gt).abs().mean(dim=0)[-1] for m in METHODS}
    vmax = max(float(e.max()) for e in errs.values())
    fig, axes = plt.subplots(2, len(cols), figsize=(2.4 * len(cols), 5.2))
    for j, name in enumerate(cols):
        ax = axes[0, j]
        ax.imshow(to_rgb(cfg, ex[name], gt), interpolation="nearest")
        ax.set_title(LABELS.get(name, name), fontsize=7)
        if name != "ground truth":
            draw_borders(ax, borders_of(n, d.tiles, 0 if name == "no_overlap" else d.overlap), n)
            im = axes[1, j].imshow(errs[name], cmap="magma", vmin=0, vmax=vmax, interpolation="nearest")
            draw_borders(axes[1, j], borders_of(n, d.tiles, 0 if name == "no_overlap" else d.overlap), n)
            axes[1, j].set_title(f"|error|, PSNR {mean_over_videos(results.rows, d, name, 'psnr'):.1f} dB", fontsize=7)
        else:
            axes[1, j].imshow(to_rgb(cfg, ex["noisy input"], gt), interpolation="nearest")
            axes[1, j].set_title(f"noisy input (sigma {d.first_sigma:g})", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.subplots_adjust(right=0.92)
    fig.colorbar(im, cax=fig.add_axes([0.935, 0.12, 0.01, 0.33]), label="mean |error| over channels")
    fig.suptitle(f"{d.label()}, last latent frame; top: smooth field / objects / edges as RGB", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweeps(cfg: BenchConfig, results: Results, overlap_path: Path, sigma_path: Path, steps_path: Path) -> None:
    """PSNR, border band PSNR and seam score of every method against overlap, first sigma and steps."""
    plt = pyplot()
    groups = sweeps(cfg)
    for path, key, x_of, xlabel in ((overlap_path, "overlap", lambda c: c.overlap, "overlap (latent cells)"),
                                    (sigma_path, "first sigma", lambda c: c.first_sigma, "first sigma"),
                                    (steps_path, "steps", lambda c: c.steps, "steps of the stage")):
        cases = sorted(groups[key], key=x_of)
        xs = [x_of(c) for c in cases]
        panels = [("psnr", "PSNR (dB)"), ("psnr_band", "border band PSNR (dB)"), ("seam", "seam score (1 = none)")]
        if key == "first sigma":
            panels.append(("disagreement", "tile drift of (d) (RMS / GT RMS)"))
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
        for ax, (attr, title) in zip(axes, panels):
            for m in METHODS if attr != "disagreement" else ("blend_at_end",):
                ax.plot(xs, [mean_over_videos(results.rows, c, m, attr) for c in cases], marker="o", label=LABELS[m])
            if attr == "seam":
                ax.plot(xs, [results.reference_seam.get(c) for c in cases], "k:", label="ground truth")
            if attr == "disagreement":
                ax.axhline(cfg.drift_tolerance, color="k", ls=":", lw=0.8)
                ax.axvline(drift_onset(cfg, results)[0], color="r", ls="--", lw=0.8, label="warning sigma")
                ax.legend(fontsize=7)
            ax.set_xlabel(xlabel)
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
