"""bench/results/fusion.md and fusion.json: the page's text and tables (its verdicts: `verdicts`; its pictures:
`crops`)."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path

import torch

from ...ltx.model.patch import DRIFT_WARNING_SIGMA
from ...tiling import AxisTiling
from ..quality.report import PSNR_TIE_DB, SEAM_TIE
from ..quality.train import Trained
from .config import FusionConfig
from .crops import plot_crops
from .methods import label, methods
from .peer import peer_starts
from .sweep import Results, mean, summary
from .verdicts import shifted_verdict, verdicts


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "∞ (same)" if math.isinf(x) else f"{x:.{digits}f}"


def _pivot(cfg: FusionConfig, res: Results, case: str, attr: str, digits: int, title: str,
           extra: list[str] | None = None) -> list[str]:
    """One figure: a row per method, a column per sampler."""
    lines = [f"| {title} | " + " | ".join(cfg.samplers) + " |", "|---" + "|---:" * len(cfg.samplers) + "|"]
    for m in methods(cfg):
        lines.append(f"| {label(cfg, m)} | " + " | ".join(
            _f(mean(res.rows, attr, case=case, sampler=s, method=m), digits) for s in cfg.samplers) + " |")
    return lines + (extra or [])


def _seam_pivot(cfg: FusionConfig, res: Results, case: str) -> list[str]:
    """Seam excess over the untiled refine, with the ground truth's own at the pack's edges as the last row."""
    gt = [_f(mean(res.rows, "seam_gt", case=case, sampler=s, method="tdp")
             - mean(res.rows, "seam_untiled", case=case, sampler=s, method="tdp"), 3) for s in cfg.samplers]
    return _pivot(cfg, res, case, "seam_excess", 3, "seam excess over untiled",
                  [f"| ground truth at the pack's edges | {' | '.join(gt)} |"])



def _timing(cfg: FusionConfig, res: Results) -> list[str]:
    t = res.timing
    if not t:
        return ["No wall times measured yet (`--timing`)."]
    loads = [x for s in cfg.samplers for m in methods(cfg) for x in t.get(s, {}).get(m, {}).get("load", [])]
    lines = [f"Median of {t['repeats']} refines of video 0 at 2S, seconds, {t['threads']} torch thread on "
             f"{t['cpus']} CPUs; 1-minute load average {min(loads):.2f} to {max(loads):.2f} during the runs (above "
             "about 1 other jobs shared the CPU and the times are inflated, unevenly). Tokens are the cost figure "
             "that does not depend on the machine.", "",
             "| method | " + " | ".join(cfg.samplers) + " |", "|---" + "|---:" * len(cfg.samplers) + "|"]
    for m in methods(cfg):
        lines.append(f"| {label(cfg, m)} | " + " | ".join(
            _f(t.get(s, {}).get(m, {}).get("median")) for s in cfg.samplers) + " |")
    return lines


def write(cfg: FusionConfig, trained: Trained, res: Results, out: Path, comfy_version: str) -> Path:
    """Write fusion.md, fusion.json and one crop picture per sampler into `out`; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    out_case, in_case = cfg.cases()
    s_cells, p = cfg.range_cells, cfg.peer_tile
    n = out_case.cells
    peer_tiles = len(peer_starts(n, p.height, p.overlap_h)) * len(peer_starts(n, p.width, p.overlap_w))
    peer_tiles_in = (len(peer_starts(s_cells, p.height, p.overlap_h)) * len(peer_starts(s_cells, p.width, p.overlap_w)))
    full_tokens = mean(res.rows, "tokens", case=out_case.name, sampler=cfg.samplers[0], method="full")
    pack_tile = max(i.length for i in AxisTiling(cfg.tiles[0], cfg.overlap).intervals(n))
    rough = [mean(res.rows, "texture_all", case=out_case.name, sampler=s, method="full") for s in cfg.samplers]
    lines = [
        "# LTX TDP against Lightricks' tiled samplers",
        "",
        f"`bench/fusion/run.py` (see docs/benchmarks.md, *Against Lightricks' tiled samplers*). ComfyUI {comfy_version}, "
        f"CPU ({platform.machine()}), torch {torch.__version__}, 1 torch thread. The quality benchmark's trained model "
        f"(ComfyUI's `LTXVModel`, RoPE range S = {s_cells} cells; bench/results/quality.md) refines its synthetic "
        f"latent videos, whose ground truth is known; {cfg.videos} videos per case, {cfg.train.data.frames} latent frames.",
        "",
        "## Methods",
        "",
        "Every refine is `SamplerCustomAdvanced` with `BasicGuider` and a `KSamplerSelect` sampler, the clean video "
        "noised by the sampler to the first sigma with one fixed noise field per video (the same for every method). "
        "The two Lightricks methods are rebuilt in `bench/fusion/` from their public description, not their code:",
        "",
        f"* **{label(cfg, 'full')}**: the whole frame, one model call per step.",
        f"* **{label(cfg, 'tdp')}**: LTX TDP Tile Config's defaults through LTX TDP Model Patcher: every model call "
        "runs per tile, the x0 predictions blended with trapezoid windows that sum to one.",
        *(f"* **{label(cfg, f'tdp_{h}x{w}')}**: the same with more tiles, at a higher cost (where they do not "
          "fit the frame, —)." for h, w in cfg.more_tiles),
        *(f"* **{label(cfg, f'tdp_grid_cycle{c}')}**: the pack whose model calls cycle through {c} grids, every "
          "boundary between tiles moved by the shift (same tiles, same tokens; `bench/fusion/shifted.py`)."
          for c in cfg.grid_cycles),
        f"* **{label(cfg, 'ltxv_tiled_fusion')}**: LTXV Tiled Fusion Sampler: a SAMPLER whose function, at every "
        "sigma pair, calls the chosen sampler's own function on each tile's crop of the canvas with the two sigmas "
        "(a history sampler starts afresh each step; an ancestral one gets a seed per tile and step) and merges "
        "the stepped tiles with separable Gaussian weights (variance 0.05 over the tile, no floor) over their sum.",
        f"* **{label(cfg, 'ltxv_tiled_fusion_tdp_tiles')}**: the same step fusion on the pack's tiles and "
        "overlap: equal cost with the pack.",
        f"* **{label(cfg, 'ltxv_tiled_fusion_one_tile')}**: the same with one tile, the whole frame: what its "
        "per-step sampler calls alone do to a sampler (untiled in space).",
        f"* **{label(cfg, 'ltxv_tiled_sampler')}**: LTXV Tiled Sampler's way: each tile sampled to the end as its "
        "own latent (a seed per tile), blended once at the end with the pack's windows.",
        "",
        f"The pack's patcher warns on every refine here, rightly: the first sigma {cfg.sigmas[0]:g} is above its "
        f"drift warning ({DRIFT_WARNING_SIGMA:g}), and {cfg.tiles[0]} x {cfg.tiles[1]} tiles on 2S are "
        f"{pack_tile} cells, beyond the {s_cells}-cell range.",
        "",
        "**The peer's default tile on this model.** On real LTX it is 1024 x 576 px with an overlap fraction of at "
        "least 0.5, and LTX's RoPE range is 2048 px. This model's range is S = "
        f"{s_cells} cells = {s_cells * 32} \"px\"; the tile is taken as the same fraction of the range, rounded up to "
        f"whole cells: width {s_cells} x 1024/2048 = {p.width} cells, height {s_cells} x 576/2048 = "
        f"{s_cells * 576 / 2048:g} -> **{p.height}** cells (rounded up: the model was trained on crops of "
        f"{cfg.train.min_crop}..{s_cells} cells, a smaller tile is further from what it saw); overlap 0.5 of that, "
        f"rounded up: {p.overlap_h} x {p.overlap_w} cells. Tiles start every {p.height - p.overlap_h} x "
        f"{p.width - p.overlap_w} cells from 0, the last moved back to end at the frame's edge (the description "
        f"does not say): {peer_tiles} tiles at 2S, {peer_tiles_in} at S. Grid shift (`grid_cycle`) is off for it; "
        "shifted grids are measured on the pack instead.",
        "",
        f"**Sigmas and samplers.** ComfyUI's official LTX-2.5 templates run stage 2 with euler_ancestral along "
        f"`{', '.join(f'{x:g}' for x in cfg.sigmas)}`; every sampler here runs that schedule (three steps, so a "
        "history sampler uses its history once, at the second step). Samplers: " + ", ".join(cfg.samplers) + ".",
        "",
        "**Figures.** *PSNR*: peak = the ground truth's range; at 2S against the ground truth (outside the model's "
        "range, the case tiling is for); at S against the untiled refine with the same sampler (inside the range, "
        "where untiled is what tiling can at best reproduce; the pack's 2 x 2 tiles are then smaller than the frame). "
        "*Seam excess*: the seam score (mean |gradient| across the method's own tile edges over mean |gradient| "
        "elsewhere, bench/quality/metrics.py) minus the untiled refine's at the same edges, so every method is "
        "compared with what the same model and sampler give on the same lines without tiles (0: no seam; the "
        "ground truth's own is shown too). The untiled refines are measured at the pack's edges; an axis whose "
        "edges fall on most rows (the peer's default, height: every row) is left out. *Texture of the blend "
        "bands*: high-pass energy (x minus its 3 x 3 mean, squared) in the method's most blended quarter of the "
        "cells over its least blended quarter (blend: 1 - sum of squared normalised weights, the share of "
        "independent per-tile noise a merge averages away), over the untiled refine's same ratio on the same cells: "
        "below 1 the bands are smoother than the rest (independent noise averaged away, or disagreeing tiles "
        "averaged), above 1 rougher. *Texture, whole frame*: the output's high-pass energy over the ground "
        f"truth's (a refine from sigma {cfg.sigmas[0]:g} leaves fine error everywhere: "
        f"{min(rough):.1f}x to {max(rough):.1f}x the ground truth's untiled here, so a method that smooths gains PSNR). "
        "*Tokens*: latent cells of every model call, counted by an APPLY_MODEL "
        "wrapper inside the tiling (one token per cell for LTXV).",
        "",
        f"## Headline: outside the range ({n} x {n} cells = 2S), against the ground truth",
        "",
        *_pivot(cfg, res, out_case.name, "psnr", 2, "PSNR (dB)"),
        "",
        *_seam_pivot(cfg, res, out_case.name),
        "",
        *_pivot(cfg, res, out_case.name, "texture_rel", 3, "texture of the blend bands, over untiled's"),
        "",
        *_pivot(cfg, res, out_case.name, "texture_all", 3, "texture, whole frame / ground truth's"),
        "",
        f"Tokens per refine (3 model calls): " + ", ".join(
            f"{label(cfg, m)} {mean(res.rows, 'tokens', case=out_case.name, sampler=cfg.samplers[0], method=m):.0f} "
            f"(x{mean(res.rows, 'tokens', case=out_case.name, sampler=cfg.samplers[0], method=m) / full_tokens:.2f})"
            for m in methods(cfg)) + ".",
        "",
        f"## Inside the range ({in_case.cells} x {in_case.cells} cells = S), against the untiled refine",
        "",
        *_pivot(cfg, res, in_case.name, "psnr", 2, "PSNR vs untiled (dB)"),
        "",
        *_pivot(cfg, res, in_case.name, "psnr_gt", 2, "PSNR vs ground truth (dB)"),
        "",
        *_seam_pivot(cfg, res, in_case.name),
        "",
        "## Wall time",
        "",
        *_timing(cfg, res),
        "",
        "## Shifted grids between model calls (the peer's grid_cycle, on the pack)",
        "",
        "Same tiles, same tokens per call as the pack. Seam excess over untiled at the method's own edges (the "
        "pack's 2 lines per axis; a cycle's grids' 4 or 6), and at the common lines (the pack's edges at every "
        "shift, the same 6 per axis for all: the total disturbance, thinned by the lines without an edge of that "
        "method); PSNR against the case's reference. The rule: a grid cycle is kept only "
        f"if its seam excess (in absolute value) is lower than the pack's by more than the tie ({SEAM_TIE}) in every "
        f"(sampler, case) pair and its PSNR is nowhere lower than the pack's by more than the tie ({PSNR_TIE_DB} dB).",
        "",
        *shifted_verdict(cfg, res),
        "",
        "## Pictures",
        "",
        f"`fusion_<sampler>.png`: a {cfg.crop} x {cfg.crop}-cell crop of video 0 at 2S, centred where the pack's four "
        "tiles meet, last latent frame, every method beside the ground truth (top: smooth field / objects / edges as "
        "RGB; bottom: |error| against the ground truth); dashed: the method's tile edges.",
        "",
        *verdicts(cfg, res),
    ]
    page = out / "fusion.md"
    page.write_text("\n".join(lines) + "\n")
    (out / "fusion.json").write_text(json.dumps({"summary": summary(res.rows), "timing": res.timing}, indent=1))
    for s in cfg.samplers:
        plot_crops(cfg, res, s, out / f"fusion_{s}.png")
    return page
