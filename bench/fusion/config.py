"""Frozen settings of the comparison with Lightricks' tiled samplers, and the peer's defaults on the bench model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

from ..quality.config import SMOKE as QUALITY_SMOKE
from ..quality.config import TrainConfig

LTX_RANGE_PX = 2048
"""Real LTX's spatial RoPE range (`positional_embedding_max_pos` [20, 2048, 2048]): what the peer's px default is
relative to."""
PEER_TILE_PX = (576, 1024)
"""LTXV Tiled Fusion Sampler's default tile (height, width) in pixels of real LTX."""
PEER_OVERLAP_FRACTION = 0.5
"""Its smallest (default) overlap, as a fraction of the tile."""
PEER_VARIANCE = 0.05
"""The variance of its separable Gaussian merge weights, over a tile's extent taken as [0, 1]."""

LTX25_STAGE2_SIGMAS = (0.85, 0.725, 0.4219, 0.0)
"""ComfyUI's official LTX-2.5 templates: stage 2 (the upscale) runs euler_ancestral along these sigmas."""
SAMPLERS = ("euler", "euler_ancestral", "dpmpp_2m", "res_multistep", "dpmpp_2m_sde")
"""KSamplerSelect names: plain, ancestral (noise per step), history (2m, res_multistep), history and noise."""


@dataclass(frozen=True)
class PeerTile:
    """The peer's tile on a model whose RoPE range is S cells: the same fraction of the range as its px default
    of real LTX's 2048 px, rounded up to whole cells; overlap the fraction of that, rounded up (at least it)."""

    height: int
    width: int
    overlap_h: int
    overlap_w: int

    @classmethod
    def scaled(cls, range_cells: int) -> PeerTile:
        h, w = (math.ceil(range_cells * px / LTX_RANGE_PX) for px in PEER_TILE_PX)
        return cls(h, w, math.ceil(PEER_OVERLAP_FRACTION * h), math.ceil(PEER_OVERLAP_FRACTION * w))


@dataclass(frozen=True)
class Case:
    """One frame size: `cells` x `cells`; its reference is the ground truth (outside the model's range) or the
    untiled refine (inside it, where the untiled model is what tiling can at best reproduce)."""

    name: str
    cells: int
    reference: str


@dataclass(frozen=True)
class FusionConfig:
    """The whole comparison: the trained model, two frame sizes, the samplers, the stage's sigmas, the pack's tiles."""

    train: TrainConfig = TrainConfig()
    samplers: tuple[str, ...] = SAMPLERS
    sigmas: tuple[float, ...] = LTX25_STAGE2_SIGMAS
    videos: int = 4
    video_seed: int = 20_000
    tiles: tuple[int, int] = (2, 2)
    """The pack's default (LTX TDP Tile Config): 2 x 2 tiles, overlap 5 cells."""
    overlap: int = 5
    more_tiles: tuple[tuple[int, int], ...] = ((3, 3),)
    """The pack with more tiles (3 x 3: each tile within the range at 2S), at a higher cost: what the cost buys."""
    grid_cycles: tuple[int, ...] = (2, 3)
    """Shifted grids on the pack: how many grids the model calls cycle through (1 would be the pack itself)."""
    peer: PeerTile | None = None
    """The peer's tile; None: its default scaled to this model's range (`PeerTile.scaled`)."""
    timing_repeats: int = 3
    crop: int = 12
    """Side (cells) of the crops across the seam in the pictures."""

    @property
    def range_cells(self) -> int:
        return self.train.model.max_cells

    @property
    def peer_tile(self) -> PeerTile:
        return self.peer or PeerTile.scaled(self.range_cells)

    def cases(self) -> tuple[Case, ...]:
        s = self.range_cells
        return (Case("outside the range (2S)", 2 * s, "ground truth"), Case("inside the range (S)", s, "untiled"))

    def key(self, case: Case, sampler: str) -> str:
        """A short hash of what one (case, sampler)'s figures depend on besides the trained model."""
        d = dataclasses.asdict(self)
        for name in ("train", "samplers", "timing_repeats", "crop"):
            d.pop(name)
        d["peer"] = dataclasses.asdict(self.peer_tile)
        blob = json.dumps({"config": d, "case": dataclasses.asdict(case), "sampler": sampler}, sort_keys=True)
        return hashlib.sha256((blob + CODE_VERSION).encode()).hexdigest()[:12]


CODE_VERSION = "2"
"""Bump when the methods or metrics change in a way the config does not show (invalidates cached figures)."""

SMOKE = FusionConfig(train=QUALITY_SMOKE.train, samplers=("euler_ancestral", "dpmpp_2m_sde"), videos=1,
                     overlap=2, more_tiles=((1, 2),), grid_cycles=(2,), peer=PeerTile(4, 6, 2, 3), timing_repeats=1,
                     crop=6)
"""The whole comparison at minimum size (the suite's smoke run): S = 6 cells, two samplers, one video, and a coarser
peer tile than the scaled default (2 x 3 cells would be 110 tiles at 2S: minutes instead of seconds)."""
