"""Every method of the comparison, run as users run it (SamplerCustomAdvanced, BasicGuider, a KSamplerSelect
sampler), with the model tokens it processes counted at the model call.

* `full`: the whole frame, untiled;
* `tdp`: the pack, LTX TDP Tile Config's defaults (2 x 2, overlap 5) through the LTX TDP Model Patcher node;
  `tdp_<h>x<w>`: the same with more tiles;
* `tdp_grid_cycle<c>`: the pack whose model calls cycle through c shifted grids (`shifted`), same cost;
* `ltxv_tiled_fusion`: LTXV Tiled Fusion Sampler rebuilt from its public description (`peer`), at its default
  tile scaled to this model's position range;
* `ltxv_tiled_fusion_tdp_tiles`: the same step fusion on the pack's tiles and overlap (equal cost with `tdp`);
* `ltxv_tiled_fusion_one_tile`: the same with one tile, the whole frame: what its per-step sampler calls do to a
  sampler, without tiling (untiled in space, measured like `full`);
* `ltxv_tiled_sampler`: LTXV Tiled Sampler's way, rebuilt from its public description: every tile (the pack's)
  sampled to the end on its own, blended once at the end with the pack's windows (the quality benchmark's (d)).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import AxisTiling, TilingError
from ..quality.methods import Refiner
from .config import FusionConfig
from .peer import Weighted, layout_of, mixing, tiled_fusion_sampler
from .shifted import grid_shifts, shifted_tdp

TOKENS_KEY = "ltx_tdp_bench_tokens"
UNTILED = ("full", "ltxv_tiled_fusion_one_tile")
"""The methods untiled in space: measured at the pack's grid, no tile edges drawn."""


def methods(cfg: FusionConfig, cells: int | None = None) -> tuple[str, ...]:
    """Every method, in the page's order; with `cells`, those whose tiles fit a frame of cells x cells (the pack
    with more tiles may not: 3 x 3 with overlap 5 needs 20 cells)."""
    more = [(h, w) for h, w in cfg.more_tiles if cells is None or _fits(h, cfg.overlap, cells) and _fits(w, cfg.overlap, cells)]
    return ("full", "tdp", *(f"tdp_{h}x{w}" for h, w in more), *(f"tdp_grid_cycle{c}" for c in cfg.grid_cycles),
            "ltxv_tiled_fusion", "ltxv_tiled_fusion_tdp_tiles", "ltxv_tiled_fusion_one_tile", "ltxv_tiled_sampler")


def _fits(tiles: int, overlap: int, cells: int) -> bool:
    try:
        AxisTiling(tiles, overlap if tiles > 1 else 0).intervals(cells)
    except TilingError:
        return False
    return True


def pack_tiles(cfg: FusionConfig, method: str) -> tuple[int, int] | None:
    """The (height, width) tile counts of a `tdp` or `tdp_<h>x<w>` method; None for any other."""
    if method == "tdp":
        return cfg.tiles
    h, sep, w = method.removeprefix("tdp_").partition("x")
    return (int(h), int(w)) if method.startswith("tdp_") and sep and h.isdigit() and w.isdigit() else None


def short_label(cfg: FusionConfig, method: str) -> str:
    """A method's name in a picture's column title."""
    if method.startswith("tdp_grid_cycle"):
        return f"pack, grid cycle {method.removeprefix('tdp_grid_cycle')}"
    if (tiles := pack_tiles(cfg, method)) is not None:
        return f"pack {tiles[0]}x{tiles[1]}"
    return {"full": "untiled", "ltxv_tiled_fusion": "Tiled Fusion,\nits default",
            "ltxv_tiled_fusion_tdp_tiles": "Tiled Fusion,\npack's tiles", "ltxv_tiled_fusion_one_tile": "Tiled Fusion,\none tile",
            "ltxv_tiled_sampler": "Tiled Sampler,\nblend at end"}[method]


def label(cfg: FusionConfig, method: str) -> str:
    """How the page names a method."""
    p = cfg.peer_tile
    pack = f"{cfg.tiles[0]}x{cfg.tiles[1]} ov{cfg.overlap}"
    if method.startswith("tdp_grid_cycle"):
        c = int(method.removeprefix("tdp_grid_cycle"))
        return f"pack + grid cycle {c} (shifts {', '.join(map(str, grid_shifts(c, cfg.overlap)))})"
    if (tiles := pack_tiles(cfg, method)) is not None:
        return f"pack, TDP patcher ({tiles[0]}x{tiles[1]} ov{cfg.overlap})"
    return {
        "full": "untiled",
        "ltxv_tiled_fusion": f"LTXV Tiled Fusion, its default ({p.height}x{p.width} cells, ov {p.overlap_h}x{p.overlap_w})",
        "ltxv_tiled_fusion_tdp_tiles": f"LTXV Tiled Fusion, the pack's tiles ({pack})",
        "ltxv_tiled_fusion_one_tile": "LTXV Tiled Fusion, one tile (its sampler calls, untiled)",
        "ltxv_tiled_sampler": f"LTXV Tiled Sampler, blend at end ({pack})",
    }[method]


class TokenCount:
    """An APPLY_MODEL wrapper that adds up the tokens of every model call it sees (an LTXV latent cell is one
    token: patch size 1). Added last to a MODEL, it is the innermost wrapper and sees each tile's call."""

    def __init__(self):
        self.tokens = 0

    def __call__(self, executor, x, *args, **kwargs):
        self.tokens += x.shape[0] * math.prod(x.shape[2:])
        return executor(x, *args, **kwargs)


def counted(model: Any) -> tuple[Any, TokenCount]:
    """A clone of `model` with a TokenCount as its innermost APPLY_MODEL wrapper."""
    import comfy.patcher_extension as ext

    counter = TokenCount()
    m = model.clone()
    m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, TOKENS_KEY, counter)
    return m, counter


def grids(cfg: FusionConfig, method: str, height: int, width: int) -> list[list[Weighted]]:
    """The tile grids `method` blends with on an H x W frame (one per distinct model-call grid); the untiled
    refines (`full`, `ltxv_tiled_fusion_one_tile`) are measured at the pack's grid."""
    pack = dict(tiles=cfg.tiles, overlap=cfg.overlap)
    if method.startswith("tdp_grid_cycle"):
        cycle = int(method.removeprefix("tdp_grid_cycle"))
        return [layout_of("pack", **pack, window="trapezoid", shift=s)(height, width)
                for s in grid_shifts(cycle, cfg.overlap)]
    if method == "ltxv_tiled_fusion":
        return [layout_of("peer", tile=cfg.peer_tile)(height, width)]
    window = "gaussian" if method == "ltxv_tiled_fusion_tdp_tiles" else "trapezoid"
    pack["tiles"] = pack_tiles(cfg, method) or cfg.tiles
    return [layout_of("pack", **pack, window=window)(height, width)]


def mixing_of(cfg: FusionConfig, method: str, height: int, width: int) -> torch.Tensor:
    """(H, W): the share of independent per-tile noise the method's merge averages away, mean over its grids."""
    found = grids(cfg, method, height, width)
    return sum(mixing(g, height, width) for g in found) / len(found)


@dataclass(frozen=True)
class Run:
    """One refine: its output latent (B, C, F, H, W), the model tokens it processed and its wall time."""

    out: torch.Tensor
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Methods:
    """The trained MODEL, its conditioning and the comparison's settings: `run` refines with any method."""

    cfg: FusionConfig
    model: Any
    conditioning: list

    def run(self, method: str, sampler: str, clean: torch.Tensor, noise: torch.Tensor) -> Run:
        """`clean` (B, C, F, H, W) noised to the first sigma with `noise` and refined by `method` with `sampler`."""
        from ltx_tdp_devkit.comfy_runtime import run_node

        cfg = self.cfg
        refiner = Refiner(self.model, self.conditioning)
        tiling = refiner.tiling(cfg.tiles, cfg.overlap)
        sample_with = sampler
        if (tiles := pack_tiles(cfg, method)) is not None:
            model = refiner.tdp_model(refiner.tiling(tiles, cfg.overlap), True)
        elif method.startswith("tdp_grid_cycle"):
            model = shifted_tdp(self.model, cfg.tiles, cfg.overlap, int(method.removeprefix("tdp_grid_cycle")))
        else:
            model = self.model
        if method.startswith("ltxv_tiled_fusion"):
            (inner,) = run_node("KSamplerSelect", sampler_name=sampler)
            layout = {"ltxv_tiled_fusion": layout_of("peer", tile=cfg.peer_tile),
                      "ltxv_tiled_fusion_tdp_tiles": layout_of("pack", tiles=cfg.tiles, overlap=cfg.overlap, window="gaussian"),
                      "ltxv_tiled_fusion_one_tile": layout_of("pack", tiles=(1, 1), overlap=0, window="gaussian")}[method]
            sample_with = tiled_fusion_sampler(inner, layout)
        model, counter = counted(model)
        runner = Refiner(model, self.conditioning)
        start = time.perf_counter()
        if method == "ltxv_tiled_sampler":
            out, _ = runner.tiles_alone(clean, noise, cfg.sigmas, tiling, sampler)
        else:
            out = runner.sample(model, clean, noise, cfg.sigmas, sample_with)
        return Run(out, counter.tokens, time.perf_counter() - start)
