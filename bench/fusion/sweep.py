"""The figures: every method x sampler on the quality benchmark's videos at 2S (against the ground truth) and at S
(against the untiled refine), cached per (case, sampler); and the wall times, re-runnable on their own.

Every method of a (case, video) refines the same ground truth with the same noise field (quality.sweep.noise_for)
and the same run seed; the model runs on 1 torch thread (the same arithmetic everywhere, and no spinning threads
when other jobs share the CPU).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
from dataclasses import dataclass, field
from math import nan
from pathlib import Path

import torch
from ltx_tdp_devkit.core_multigpu import torch_threads

from ..quality import data
from ..quality.metrics import highpass_energy, psnr, seam_score
from ..quality.model import conditioning, load_model
from ..quality.sweep import noise_for
from ..quality.train import Trained
from .config import Case, FusionConfig
from .methods import Methods, grids, methods, mixing_of
from .peer import Weighted, layout_of
from .shifted import grid_shifts

log = logging.getLogger("ltx_tdp.bench.fusion")

THREADS = 1


@dataclass(frozen=True)
class Row:
    """The figures of one method with one sampler on one video of one case."""

    case: str
    sampler: str
    method: str
    video: int
    psnr: float
    """Against the case's reference: the ground truth (2S) or the untiled refine with the same sampler (S)."""
    psnr_gt: float
    seam: float
    """Seam score at the method's own tile edges (`edges`); NaN when no edge is left to measure at."""
    seam_untiled: float
    """The untiled refine's (same sampler) at the same edges: what the same model and noise give without tiles."""
    seam_gt: float
    """The ground truth's at the same edges."""
    seam_common: float
    """Seam score at the edges of the pack's grid at every shift the grid cycles use, 0 included (`common_edges`):
    the one set of lines at which the pack and its shifted grids are compared."""
    texture: float
    """High-pass energy of the output in its most blended cells over its least blended ones, divided by the same
    ratio of the ground truth: 1 = the blend bands carry the texture and noise the interior does."""
    texture_untiled: float
    """The untiled refine's `texture` on the same cells."""
    texture_all: float
    """High-pass energy of the whole output over the ground truth's."""
    tokens: int

    @property
    def seam_excess(self) -> float:
        """Seam score over the untiled refine's at the same edges (0: no seam the untiled refine does not have)."""
        return self.seam - self.seam_untiled

    @property
    def texture_rel(self) -> float:
        """`texture` over the untiled refine's on the same cells (1: the blend bands as untiled has them)."""
        return self.texture / self.texture_untiled


@dataclass
class Part:
    """What one (case, sampler) adds: its rows and, for video 0, every method's output (C, F, H, W)."""

    rows: list[Row]
    example: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    examples: dict[tuple[str, str], dict[str, torch.Tensor]] = field(default_factory=dict)
    """(case name, sampler) -> "ground truth" and every method's output on video 0."""
    timing: dict = field(default_factory=dict)


def one_thread() -> contextlib.AbstractContextManager[None]:
    """torch computes with THREADS threads within the block (the devkit's one thread-count switch)."""
    return torch_threads(THREADS)


def edges(layouts: list[list[Weighted]], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(height, width) tile edges of all `layouts` on an n x n frame: every e, 0 < e < n, where a tile starts or
    ends. An axis whose edges lie on more than half of the n - 1 cell boundaries is left out (empty): there every
    row is an edge and nothing is left to compare with."""
    out = []
    for axis in (0, 1):
        found = {e for g in layouts for tile in g for e in (tile[axis].start, tile[axis].stop) if 0 < e < n}
        out.append(tuple(sorted(found)) if len(found) <= (n - 1) / 2 else ())
    return out[0], out[1]


def common_edges(cfg: FusionConfig, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The edges of the pack's grid on an n x n frame at shift 0 and at every shift of `cfg.grid_cycles`."""
    shifts = sorted({0, *(s for c in cfg.grid_cycles for s in grid_shifts(c, cfg.overlap))})
    return edges([layout_of("pack", tiles=cfg.tiles, overlap=cfg.overlap, window="trapezoid", shift=s)(n, n)
                  for s in shifts], n)


def texture(out: torch.Tensor, gt: torch.Tensor, mix: torch.Tensor) -> float:
    """High-pass energy in the most blended quarter of the cells (mixing >= its 75th percentile, > 0) over the
    least blended quarter (<= its 25th percentile), divided by the ground truth's same ratio; NaN if either is empty."""
    band = (mix >= torch.quantile(mix, 0.75)) & (mix > 0)
    inner = mix <= torch.quantile(mix, 0.25)
    if not band.any() or not inner.any() or bool((band & inner).all()):
        return float("nan")
    e_out, e_gt = highpass_energy(out), highpass_energy(gt)
    return float((e_out[band].mean() / e_out[inner].mean()) / (e_gt[band].mean() / e_gt[inner].mean()))


def run(cfg: FusionConfig, trained: Trained, store: Path | None = None, progress: bool = True) -> Results:
    """Every (case, sampler): from `store` when cached there (keyed by cfg.key), else refined now and stored."""
    results = Results()
    todo = []
    for case in cfg.cases():
        for sampler in cfg.samplers:
            path = store / f"part_{cfg.key(case, sampler)}.pt" if store is not None else None
            if path is not None and path.is_file():
                _merge(results, case, sampler, torch.load(path, weights_only=False))
            else:
                todo.append((case, sampler, path))
    if todo:
        bench = _methods(cfg, trained)
        total = sum(cfg.videos * len(methods(cfg, case.cells)) for case, _, _ in todo)
        with one_thread(), _bar(total, "refines", progress) as bar:
            for case, sampler, path in todo:
                part = _refine(cfg, bench, case, sampler, bar)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    torch.save(part, path)
                _merge(results, case, sampler, part)
    if store is not None and (store / TIMING).is_file():
        results.timing = json.loads((store / TIMING).read_text())
    return results


TIMING = "timing.json"


def time_methods(cfg: FusionConfig, trained: Trained, store: Path | None = None, progress: bool = True) -> dict:
    """Wall time of every method x sampler on video 0 at 2S, `cfg.timing_repeats` times, each with the 1-minute load
    average just before it; written to `store`/timing.json. Returns {sampler: {method: {...}}}."""
    bench = _methods(cfg, trained)
    case = cfg.cases()[0]
    gt, noise = _video(cfg, case, 0)
    out: dict = {"threads": THREADS, "cpus": os.cpu_count(), "repeats": cfg.timing_repeats}
    todo = methods(cfg, case.cells)
    with one_thread(), _bar(len(cfg.samplers) * len(todo) * cfg.timing_repeats, "timing", progress) as bar:
        for sampler in cfg.samplers:
            out[sampler] = {}
            for method in todo:
                seconds, loads = [], []
                for _ in range(cfg.timing_repeats):
                    loads.append(os.getloadavg()[0])
                    seconds.append(bench.run(method, sampler, gt, noise).seconds)
                    bar.update(1)
                out[sampler][method] = {"median": statistics.median(seconds), "seconds": seconds, "load": loads}
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
        (store / TIMING).write_text(json.dumps(out, indent=1))
    return out


def _methods(cfg: FusionConfig, trained: Trained) -> Methods:
    return Methods(cfg, load_model(trained.checkpoint), conditioning(cfg.train.model))


@contextlib.contextmanager
def _bar(total: int, desc: str, progress: bool):
    import comfy.utils
    from tqdm import tqdm

    saved = comfy.utils.PROGRESS_BAR_ENABLED
    comfy.utils.PROGRESS_BAR_ENABLED = False  # one bar over everything instead of one per sampling run
    bar = tqdm(total=total, desc=desc, disable=not progress)
    try:
        yield bar
    finally:
        bar.close()
        comfy.utils.PROGRESS_BAR_ENABLED = saved


def _video(cfg: FusionConfig, case: Case, v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ground truth (1, C, F, n, n) of video v of `case` and its noise field."""
    seed = cfg.video_seed + v
    gt = data.video(cfg.train.data, case.cells, case.cells, seed)[None]
    return gt, noise_for(seed, gt.shape)


def _refine(cfg: FusionConfig, bench: Methods, case: Case, sampler: str, bar) -> Part:
    n = case.cells
    part = Part([])
    common = common_edges(cfg, n)
    # Where each method's tiles meet and how much its merge mixes: the same for every video of the case.
    layout = {m: (edges(grids(cfg, m, n, n), n), mixing_of(cfg, m, n, n)) for m in methods(cfg, n)}
    for v in range(cfg.videos):
        gt, noise = _video(cfg, case, v)
        runs = {}
        for method in methods(cfg, n):
            runs[method] = bench.run(method, sampler, gt, noise)
            if not torch.isfinite(runs[method].out).all():
                raise RuntimeError(f"{method} with {sampler} gave a non-finite output ({case.name}, video {v})")
            bar.update(1)
        untiled = runs["full"].out
        reference = gt if case.reference == "ground truth" else untiled
        for method, r in runs.items():
            at, mix = layout[method]
            seam = (lambda x: seam_score(x, at)) if any(at) else (lambda x: nan)  # noqa: E731
            part.rows.append(Row(
                case=case.name, sampler=sampler, method=method, video=v,
                psnr=psnr(r.out, reference), psnr_gt=psnr(r.out, gt),
                seam=seam(r.out), seam_untiled=seam(untiled), seam_gt=seam(gt), seam_common=seam_score(r.out, common),
                texture=texture(r.out, gt, mix), texture_untiled=texture(untiled, gt, mix),
                texture_all=float(highpass_energy(r.out).mean() / highpass_energy(gt).mean()),
                tokens=r.tokens))
        if v == 0:
            part.example = {"ground truth": gt[0], **{m: r.out[0] for m, r in runs.items()}}
    return part


def _merge(results: Results, case: Case, sampler: str, part: Part) -> None:
    results.rows.extend(part.rows)
    results.examples[(case.name, sampler)] = part.example


def mean(rows: list[Row], attr: str, **match) -> float:
    """The mean of `attr` over the rows matching every `match` (NaN values skipped); NaN when none."""
    values = [getattr(r, attr) for r in rows if all(getattr(r, k) == v for k, v in match.items())]
    values = [x for x in values if x == x]
    return sum(values) / len(values) if values else float("nan")


FIGURES = ("psnr", "psnr_gt", "seam", "seam_untiled", "seam_gt", "seam_common", "seam_excess", "texture",
           "texture_untiled", "texture_rel", "texture_all", "tokens")


def summary(rows: list[Row]) -> dict:
    """{case: {sampler: {method: {figure: mean over the videos, and "videos": how many}}}} (fusion.json)."""
    out: dict = {}
    for r in rows:
        out.setdefault(r.case, {}).setdefault(r.sampler, {}).setdefault(r.method, None)
    for case, samplers in out.items():
        for sampler, found in samplers.items():
            for method in found:
                match = dict(case=case, sampler=sampler, method=method)
                found[method] = {"videos": sum(all(getattr(r, k) == v for k, v in match.items()) for r in rows),
                                 **{f: mean(rows, f, **match) for f in FIGURES}}
    return out
