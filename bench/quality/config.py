"""Frozen settings of the quality benchmark and the cache key of a trained model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

LATENT_CHANNELS = 128
"""LTXV's latent width (ComfyUI's LTXV latent format): the synthetic videos mix a few sources into it."""
CELL_PX = 32
"""One latent cell is 32 pixels in space for LTX; the model's RoPE sees pixel positions."""
RANGE_PX = 2048
"""The spatial `positional_embedding_max_pos` every ComfyUI's LTXVModel uses, whatever its config says (0.3.75)."""


@dataclass(frozen=True)
class DataConfig:
    """The synthetic latent videos: a smooth field, moving objects, edges, a texture; mixed into 128 channels."""

    frames: int = 2
    """Latent frames per video (9 pixel frames): enough for objects to move, small enough to train here."""
    sources: int = 6
    """Independent source maps mixed into the latent channels by one fixed random matrix."""
    mixing_seed: int = 1234
    smooth_wavelength: tuple[float, float] = (16.0, 64.0)
    """Wavelengths (latent cells) of the smooth field's plane waves: it spans a whole training crop and more."""
    texture_wavelength: tuple[float, float] = (3.0, 6.0)
    object_radius: tuple[float, float] = (1.5, 4.0)
    object_density: float = 1 / 48
    """Objects per latent cell of the frame and a margin they can enter from."""
    object_speed: float = 1.5
    """Largest object speed, latent cells per latent frame."""
    edges: int = 2
    """Straight edges (steps) crossing each frame."""
    edge_softness: float = 0.3
    """Width of an edge or an object rim, latent cells."""


@dataclass(frozen=True)
class ModelConfig:
    """ComfyUI's LTXVModel, small: `num_layers` blocks of `heads` x `head_dim` = 128 wide."""

    num_layers: int = 3
    heads: int = 4
    head_dim: int = 32
    caption_channels: int = 16
    context_tokens: int = 8
    max_cells: int = 16
    """S: the largest training crop (latent cells per side). The RoPE range is set to S cells, as LTX-2's
    `[20 s, 2048 px, 2048 px]` covers what it was trained on; a frame of 2S is twice that range."""

    def transformer_config(self) -> dict:
        """The LTXVModel constructor arguments, stored in the checkpoint's metadata for ComfyUI's loader.

        RoPE sees a cell at position cell x `vae_scale_factors` / `positional_embedding_max_pos`, S cells being the
        range. ComfyUI 0.3.75's LTXVModel ignores the max_pos it is given and always divides by [20, 2048, 2048]; every
        version takes the scale factors. So where 2048 / S is a power of two (S = 16: 128 px per cell) the range is
        stated as max_pos 2048 px with 2048 / S px per cell, which gives every ComfyUI the positions of max_pos
        S x 32 px at 32 px per cell, bit for bit (powers of two); any other S (the smoke run's 6) keeps 32 px per
        cell and max_pos S x 32 px, which ComfyUI 0.3.75 does not honour.
        """
        width = self.heads * self.head_dim
        per_cell = RANGE_PX // self.max_cells
        exact = per_cell * self.max_cells == RANGE_PX and per_cell & (per_cell - 1) == 0
        range_px, per_cell = (RANGE_PX, per_cell) if exact else (self.max_cells * CELL_PX, CELL_PX)
        return {
            "num_layers": self.num_layers,
            "num_attention_heads": self.heads,
            "attention_head_dim": self.head_dim,
            "cross_attention_dim": width,
            "caption_channels": self.caption_channels,
            "in_channels": LATENT_CHANNELS,
            "positional_embedding_max_pos": [20, range_px, range_px],
            "vae_scale_factors": [8, per_cell, per_cell],
        }


@dataclass(frozen=True)
class TrainConfig:
    """Rectified-flow training on crops of 8..S cells whose positions start at 0."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    steps: int = 2000
    batch: int = 4
    lr: float = 1.5e-3
    warmup: int = 40
    min_crop: int = 8
    sigma_min: float = 0.02
    seed: int = 0
    threads: int = 1
    holdout_videos: int = 8
    holdout_sigmas: tuple[float, ...] = (0.1, 0.25, 0.4, 0.625, 0.8, 1.0)

    def key(self) -> str:
        """A short hash of every setting that changes the trained weights (the cache key)."""
        d = dataclasses.asdict(self)
        for name in ("threads", "holdout_videos", "holdout_sigmas"):  # they do not change the weights
            d.pop(name)
        blob = json.dumps(d, sort_keys=True) + TRAINING_CODE_VERSION
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


TRAINING_CODE_VERSION = "1"
"""Bump when the training code changes in a way the config does not show (invalidates the cache)."""
SWEEP_CODE_VERSION = "1"
"""Bump when the methods or metrics change in a way the config does not show (invalidates cached sweeps)."""


@dataclass(frozen=True)
class Case:
    """One refine of a 2S frame: its tiling, the stage's first sigma and its number of steps."""

    tiles: tuple[int, int] = (2, 2)
    overlap: int = 5
    first_sigma: float = 0.625
    steps: int = 2

    @property
    def sigmas(self) -> tuple[float, ...]:
        """Two steps: upstream's stage-2 schedule `0.625, 0.4, 0` scaled to start at `first_sigma`; more
        steps: evenly spaced from `first_sigma` to 0."""
        if self.steps == 2:
            return (self.first_sigma, round(self.first_sigma * 0.4 / 0.625, 4), 0.0)
        return tuple(round(self.first_sigma * (1 - i / self.steps), 4) for i in range(self.steps + 1))

    def label(self) -> str:
        steps = "" if self.steps == 2 else f" {self.steps} steps"
        return f"{self.tiles[0]}x{self.tiles[1]} ov{self.overlap} s{self.first_sigma:g}{steps}"


@dataclass(frozen=True)
class BenchConfig:
    """The comparison: frame size 2S, videos per case, and the one-axis sweeps around the default case."""

    train: TrainConfig = TrainConfig()
    videos: int = 4
    video_seed: int = 10_000
    overlaps: tuple[int, ...] = (0, 2, 5, 8)
    tilings: tuple[tuple[int, int], ...] = ((2, 2), (3, 3), (2, 4))
    first_sigmas: tuple[float, ...] = (0.4, 0.5, 0.625, 0.7, 0.8, 0.9, 1.0)
    band: int = 2
    """Half-width (cells) of the band around tile borders in which border PSNR is measured."""
    steps: tuple[int, ...] = (2, 4, 8)
    """Steps of the stage (default tiling and first sigma): more steps, more blended intermediates."""
    drift_tolerance: float = 0.10
    """Tiles have drifted apart when, refined on their own (d), neighbours differ in their overlaps by more
    than this fraction of the ground truth's RMS."""
    default: Case = field(default_factory=Case)

    @property
    def cells(self) -> int:
        return 2 * self.train.model.max_cells

    def cases(self) -> tuple[Case, ...]:
        """The default case, then the overlap, tiling, first-sigma and steps sweeps (each case once)."""
        d = self.default
        out = [d]
        out += [dataclasses.replace(d, overlap=o) for o in self.overlaps]
        out += [dataclasses.replace(d, tiles=t) for t in self.tilings]
        out += [dataclasses.replace(d, first_sigma=s) for s in self.first_sigmas]
        out += [dataclasses.replace(d, steps=n) for n in self.steps]
        return tuple(dict.fromkeys(out))

    def case_key(self, case: Case) -> str:
        """A short hash of what one case's results depend on besides the trained model."""
        blob = json.dumps({"case": dataclasses.asdict(case), "videos": self.videos, "video_seed": self.video_seed,
                           "band": self.band, "cells": self.cells}, sort_keys=True) + SWEEP_CODE_VERSION
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


SMOKE = BenchConfig(
    train=TrainConfig(data=DataConfig(frames=2), model=ModelConfig(num_layers=1, heads=2, head_dim=16, max_cells=6),
                      steps=3, batch=2, min_crop=4, holdout_videos=2, holdout_sigmas=(0.4, 1.0), warmup=1),
    videos=1, overlaps=(0, 2), tilings=((2, 2),), first_sigmas=(0.625,), steps=(2,), band=1,
    default=Case(tiles=(2, 2), overlap=2),
)
"""The whole benchmark at minimum size (the suite's smoke run): seconds, not minutes."""
