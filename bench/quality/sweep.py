"""The comparison: ground-truth videos at 2S, noised to the first sigma and refined by every method, measured.

Every case is refined on the same videos with the same noise field. The untiled refine (a) depends only
on the sigmas and tiles alone without overlap (e) only on the tile counts and sigmas: each is run once per
video and reused by every case that shares it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import data
from .config import BenchConfig, Case
from .methods import METHODS, Refiner
from .metrics import band_mask, border_positions, psnr, seam_score
from .model import conditioning, load_model
from .train import Trained

log = logging.getLogger("ltx_tdp.bench.quality")


@dataclass(frozen=True)
class Row:
    """The figures of one method on one video in one case."""

    case: Case
    method: str
    video: int
    psnr: float
    psnr_band: float
    psnr_interior: float
    seam: float
    psnr_vs_full: float
    psnr_band_vs_full: float
    disagreement: float | None
    """RMS difference of neighbouring tiles in their overlaps, over the ground truth's RMS (tiles refined
    alone only): how far tiles drift apart when nothing ties them together."""


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    reference_seam: dict[Case, float] = field(default_factory=dict)
    """The ground truth's own seam score at each case's tile borders, mean over the videos (what "no seam"
    measures on these videos)."""
    example: dict[str, torch.Tensor] = field(default_factory=dict)
    """The default case on video 0: "ground truth" and every method's output, (C, F, H, W)."""


def borders_of(n: int, tiles: tuple[int, int], overlap: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(height, width) tile edges of a frame of n x n cells."""
    return (border_positions(n, tiles[0], overlap if tiles[0] > 1 else 0),
            border_positions(n, tiles[1], overlap if tiles[1] > 1 else 0))


def noise_seed(video_seed: int) -> int:
    """The seed of video `video_seed`'s noise field (what ComfyUI's RandomNoise takes to make the same field)."""
    return video_seed + 7


def noise_for(video_seed: int, shape: torch.Size) -> torch.Tensor:
    """The one noise field of video `video_seed`, shared by every method and case: torch.randn of `shape` from a
    generator seeded with `noise_seed(video_seed)`, as ComfyUI's RandomNoise draws it for a plain latent."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(noise_seed(video_seed)))


@dataclass
class CaseResult:
    """What one case adds to Results; stored per case, so a new case does not refine the others again."""

    rows: list[Row]
    reference_seam: float
    example: dict[str, torch.Tensor] | None


def run(cfg: BenchConfig, trained: Trained, progress: bool = True, store: Path | None = None) -> Results:
    """Refine every case on `cfg.videos` videos with every method and measure each output.

    With `store`, each case's results are read from / written to `store` (keyed by `cfg.case_key`).
    """
    results = Results()
    todo = []
    for case in cfg.cases():
        path = store / f"case_{cfg.case_key(case)}.pt" if store is not None else None
        if path is not None and path.is_file():
            _merge(results, case, torch.load(path, weights_only=False))
        else:
            todo.append(case)
    if todo:
        log.info("refining %d of %d cases (%d cached)", len(todo), len(cfg.cases()), len(cfg.cases()) - len(todo))
        for case, part in _refine_cases(cfg, trained, todo, progress).items():
            if store is not None:
                store.mkdir(parents=True, exist_ok=True)
                torch.save(part, store / f"case_{cfg.case_key(case)}.pt")
            _merge(results, case, part)
    return results


def _merge(results: Results, case: Case, part: CaseResult) -> None:
    results.rows.extend(part.rows)
    results.reference_seam[case] = part.reference_seam
    if part.example is not None:
        results.example = part.example


def _refine_cases(cfg: BenchConfig, trained: Trained, cases: list[Case], progress: bool) -> dict[Case, CaseResult]:
    import comfy.utils
    from tqdm import tqdm

    model = load_model(trained.checkpoint)
    refiner = Refiner(model, conditioning(cfg.train.model))
    n = cfg.cells
    parts = {case: CaseResult([], 0.0, None) for case in cases}
    saved_pbar = comfy.utils.PROGRESS_BAR_ENABLED
    comfy.utils.PROGRESS_BAR_ENABLED = False  # one bar over the whole sweep instead of one per sampling run
    bar = tqdm(total=cfg.videos * len(cases) * len(METHODS), desc="refines", disable=not progress)
    try:
        for v in range(cfg.videos):
            seed = cfg.video_seed + v
            gt = data.video(cfg.train.data, n, n, seed)[None]
            noise = noise_for(seed, gt.shape)
            shared: dict[tuple, tuple[torch.Tensor, float | None]] = {}
            for case in cases:
                part = parts[case]
                case_borders = borders_of(n, case.tiles, case.overlap)
                cut_borders = borders_of(n, case.tiles, 0)
                band = band_mask((n, n), tuple(tuple(sorted(set(a) | set(b))) for a, b in zip(case_borders, cut_borders)),
                                 cfg.band)
                part.reference_seam += seam_score(gt, case_borders) / cfg.videos
                outputs = {}
                for method in METHODS:
                    key = {"full": ("full", case.sigmas), "no_overlap": ("no_overlap", case.tiles, case.sigmas)}.get(method)
                    if key is not None and key in shared:
                        outputs[method] = shared[key]
                    else:
                        outputs[method] = refiner.refine(method, gt, noise, case.sigmas, case.tiles, case.overlap)
                        if key is not None:
                            shared[key] = outputs[method]
                    bar.update(1)
                full = outputs["full"][0]
                gt_rms = float(gt.pow(2).mean().sqrt())
                for method, (out, disagreement) in outputs.items():
                    if not torch.isfinite(out).all():
                        raise RuntimeError(f"{method} gave a non-finite output in case {case.label()}")
                    part.rows.append(Row(
                        case=case, method=method, video=v,
                        psnr=psnr(out, gt), psnr_band=psnr(out, gt, band), psnr_interior=psnr(out, gt, ~band),
                        seam=seam_score(out, cut_borders if method == "no_overlap" else case_borders),
                        psnr_vs_full=psnr(out, full), psnr_band_vs_full=psnr(out, full, band),
                        disagreement=None if disagreement is None else disagreement / gt_rms,
                    ))
                if v == 0 and case == cfg.default:
                    sigma = case.sigmas[0]
                    part.example = {"ground truth": gt[0], "noisy input": ((1 - sigma) * gt + sigma * noise)[0],
                                    **{m: o[0][0] for m, o in outputs.items()}}
    finally:
        bar.close()
        comfy.utils.PROGRESS_BAR_ENABLED = saved_pbar
    return parts


def mean_over_videos(rows: list[Row], case: Case, method: str, attr: str) -> float:
    """The mean of `attr` over the videos of (case, method); NaN when there is no such row."""
    values = [getattr(r, attr) for r in rows if r.case == case and r.method == method and getattr(r, attr) is not None]
    return sum(values) / len(values) if values else float("nan")
