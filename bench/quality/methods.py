"""The five ways to refine a frame larger than the model's position range, all as users run them.

Every refine is ComfyUI's SamplerCustomAdvanced (BasicGuider, the euler sampler, the stage's sigmas) on
a clean latent that the sampler itself noises to the first sigma with a fixed noise field:

* (a) `full`: the whole frame, unpatched model (positions beyond the training range);
* (b) `tdp`: the pack's LTX TDP Model Patcher, per-step blend, normalised positions (its default);
* (c) `tdp_global_pos`: the patcher with `normalize_positions` off;
* (d) `blend_at_end`: every tile sampled on its own for the whole stage (its own latent, positions from
  0), blended once at the end with the pack's windows (tiling.blend_tiles);
* (e) `no_overlap`: the same with tiles that do not overlap (stitched).

Tile layouts come from the pack's node LTX TDP Tile Config, so every method cuts the same tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import VIDEO_AXES, Tile, blend_tiles, plan_tiles

METHODS = ("full", "tdp", "tdp_global_pos", "blend_at_end", "no_overlap")
LABELS = {
    "full": "(a) full frame, untiled",
    "tdp": "(b) TDP, per-step blend",
    "tdp_global_pos": "(c) TDP, global positions",
    "blend_at_end": "(d) tiles alone, blend at end",
    "no_overlap": "(e) tiles, no overlap",
}


class FixedNoise:
    """A NOISE input for SamplerCustomAdvanced that hands out one given noise field (or a crop of it)."""

    def __init__(self, noise: torch.Tensor, seed: int = 0):
        self.noise = noise
        self.seed = seed

    def generate_noise(self, input_latent: dict) -> torch.Tensor:
        if tuple(input_latent["samples"].shape) != tuple(self.noise.shape):
            raise ValueError(f"noise {tuple(self.noise.shape)} does not fit the latent {tuple(input_latent['samples'].shape)}")
        return self.noise.clone()


@dataclass(frozen=True)
class Refiner:
    """One trained MODEL and its conditioning; `sample` is one SamplerCustomAdvanced run."""

    model: Any
    conditioning: list

    def sample(self, model: Any, clean: torch.Tensor, noise: torch.Tensor, sigmas: tuple[float, ...],
               sampler: Any = "euler", seed: int = 0) -> torch.Tensor:
        """The refined latent: `clean` noised to sigmas[0] with `noise`, then denoised along `sigmas` by `sampler`
        (a KSamplerSelect name or a SAMPLER) with `seed` (the seed of the sampler's own noise, if it adds any)."""
        from ltx_tdp_devkit.comfy_runtime import run_node

        (guider,) = run_node("BasicGuider", model=model, conditioning=self.conditioning)
        if isinstance(sampler, str):
            (sampler,) = run_node("KSamplerSelect", sampler_name=sampler)
        out, _ = run_node("SamplerCustomAdvanced", noise=FixedNoise(noise, seed), guider=guider, sampler=sampler,
                          sigmas=torch.tensor(sigmas, dtype=torch.float32), latent_image={"samples": clean})
        return out["samples"].float()

    def tiling(self, tiles: tuple[int, int], overlap: int) -> Any:
        """The tile layout, from the pack's LTX TDP Tile Config node (no overlap on an untiled axis)."""
        from ...nodes.tile_config import TileCountConfigNode
        from ltx_tdp_devkit.comfy_runtime import run_node

        (tiling,) = run_node(TileCountConfigNode, frames_tiles=1, frames_overlap=0,
                             height_tiles=tiles[0], height_overlap=overlap if tiles[0] > 1 else 0,
                             width_tiles=tiles[1], width_overlap=overlap if tiles[1] > 1 else 0)
        return tiling

    def tdp_model(self, tiling: Any, normalize_positions: bool) -> Any:
        """The MODEL from the pack's LTX TDP Model Patcher node."""
        from ...nodes.tdp_patcher import TDPModelPatcherNode
        from ltx_tdp_devkit.comfy_runtime import run_node

        (model,) = run_node(TDPModelPatcherNode, model=self.model, tiling=tiling,
                            normalize_positions=normalize_positions)
        return model

    def tiles_alone(self, clean: torch.Tensor, noise: torch.Tensor, sigmas: tuple[float, ...],
                    tiling: Any, sampler: str = "euler") -> tuple[torch.Tensor, float]:
        """Every tile refined as its own latent (tile k with seed k), blended once with the pack's windows;
        also the RMS disagreement of neighbouring tiles where they overlap (0 without overlap)."""
        plan = plan_tiles(clean.shape[-3:], tiling.axes, VIDEO_AXES)
        results: dict[int, torch.Tensor] = {}

        def evaluate(tile: Tile) -> torch.Tensor:
            region = (Ellipsis, *tile.slices)
            results[tile.index] = self.sample(self.model, clean[region].contiguous(), noise[region].contiguous(), sigmas,
                                              sampler, seed=tile.index)
            return results[tile.index]

        blended = blend_tiles(plan, evaluate)
        return blended, overlap_disagreement(plan.tiles, results)

    def refine(self, method: str, clean: torch.Tensor, noise: torch.Tensor, sigmas: tuple[float, ...],
               tiles: tuple[int, int], overlap: int) -> tuple[torch.Tensor, float | None]:
        """Method `method`'s refined latent (same shape as `clean`) and, for tiles refined alone, how far
        neighbouring tiles drifted apart in their overlaps (RMS difference)."""
        runs: dict[str, Callable[[], tuple[torch.Tensor, float | None]]] = {
            "full": lambda: (self.sample(self.model, clean, noise, sigmas), None),
            "tdp": lambda: (self.sample(self.tdp_model(self.tiling(tiles, overlap), True), clean, noise, sigmas), None),
            "tdp_global_pos": lambda: (self.sample(self.tdp_model(self.tiling(tiles, overlap), False), clean, noise,
                                                   sigmas), None),
            "blend_at_end": lambda: self.tiles_alone(clean, noise, sigmas, self.tiling(tiles, overlap)),
            "no_overlap": lambda: self.tiles_alone(clean, noise, sigmas, self.tiling(tiles, 0)),
        }
        if method not in runs:
            raise ValueError(f"unknown method {method!r}; one of {METHODS}")
        return runs[method]()


def overlap_disagreement(tiles: tuple[Tile, ...], results: dict[int, torch.Tensor]) -> float:
    """RMS difference between the results of every pair of tiles on the cells both cover (0 if none)."""
    total, count = 0.0, 0
    for i, a in enumerate(tiles):
        for b in tiles[i + 1:]:
            spans = [(max(x.start, y.start), min(x.end, y.end)) for x, y in zip(a.intervals, b.intervals)]
            if any(lo >= hi for lo, hi in spans):
                continue
            ra = results[a.index][(Ellipsis, *(slice(lo - x.start, hi - x.start) for (lo, hi), x in zip(spans, a.intervals)))]
            rb = results[b.index][(Ellipsis, *(slice(lo - y.start, hi - y.start) for (lo, hi), y in zip(spans, b.intervals)))]
            total += float(((ra - rb) ** 2).sum())
            count += ra.numel()
    return (total / count) ** 0.5 if count else 0.0
