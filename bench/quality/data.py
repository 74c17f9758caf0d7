"""Synthetic latent videos with structure at every scale (pure torch, seeded).

A video is (128, frames, height, width): `DataConfig.sources` source maps mixed into the 128 latent
channels by one fixed random matrix, so channels are correlated as in a VAE latent. The sources:

* two smooth fields (plane waves of 16-64 cells) that span the frame and drift slowly;
* straight edges (soft steps) crossing the frame, moving;
* discs that move across the frame, each with its own signature over the object sources;
* a fine texture (plane waves of 3-6 cells).

The statistics do not depend on where the frame is: a crop of a large video and a small video have the
same distribution, so a model trained on small crops has seen the content of a large frame, only not its
positions.
"""

from __future__ import annotations

import functools
import math

import torch

from .config import LATENT_CHANNELS, DataConfig


@functools.lru_cache(maxsize=8)
def mixing_matrix(cfg: DataConfig) -> torch.Tensor:
    """The fixed (128, sources) mixing, columns of unit norm scaled so every channel has about unit variance."""
    gen = torch.Generator().manual_seed(cfg.mixing_seed)
    m = torch.randn(LATENT_CHANNELS, cfg.sources, generator=gen)
    return m / m.norm(dim=0, keepdim=True) * math.sqrt(LATENT_CHANNELS / cfg.sources)


def _uniform(gen: torch.Generator, lo: float, hi: float, *shape: int) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(*shape, generator=gen)


def _plane_waves(gen: torch.Generator, t: torch.Tensor, y: torch.Tensor, x: torch.Tensor, count: int,
                 wavelength: tuple[float, float], drift: float) -> torch.Tensor:
    """Sum of `count` random plane waves (unit variance on average), drifting `drift` cells per frame."""
    out = torch.zeros(t.shape[0], y.shape[0], x.shape[0])
    for _ in range(count):
        lam = float(_uniform(gen, *wavelength, 1))
        angle = float(_uniform(gen, 0, 2 * math.pi, 1))
        phase = float(_uniform(gen, 0, 2 * math.pi, 1))
        ky, kx = math.sin(angle) * 2 * math.pi / lam, math.cos(angle) * 2 * math.pi / lam
        speed = float(_uniform(gen, -drift, drift, 1)) * 2 * math.pi / lam
        arg = ky * y[None, :, None] + kx * x[None, None, :] + speed * t[:, None, None] + phase
        out += torch.cos(arg) * math.sqrt(2.0 / count)
    return out


def _soft_step(d: torch.Tensor, softness: float) -> torch.Tensor:
    return torch.sigmoid(d / softness)


def sources(cfg: DataConfig, height: int, width: int, seed: int) -> torch.Tensor:
    """The (sources, frames, height, width) source maps of video `seed`; same seed, same maps."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(cfg.frames, dtype=torch.float32)
    y = torch.arange(height, dtype=torch.float32)
    x = torch.arange(width, dtype=torch.float32)
    shape = (cfg.frames, height, width)
    src = torch.zeros(cfg.sources, *shape)
    src[0] = _plane_waves(gen, t, y, x, 3, cfg.smooth_wavelength, 1.0)
    src[1] = _plane_waves(gen, t, y, x, 3, cfg.smooth_wavelength, 1.0)
    # Edges: steps across the frame along a random direction, through a random point, moving.
    for _ in range(cfg.edges):
        angle = float(_uniform(gen, 0, 2 * math.pi, 1))
        py, px = float(_uniform(gen, 0, height, 1)), float(_uniform(gen, 0, width, 1))
        speed = float(_uniform(gen, -cfg.object_speed, cfg.object_speed, 1))
        d = (math.sin(angle) * (y[None, :, None] - py) + math.cos(angle) * (x[None, None, :] - px)
             - speed * t[:, None, None])
        src[2] += (2 * _soft_step(d, cfg.edge_softness) - 1) * float(_uniform(gen, 0.5, 1.0, 1))
    # Objects: discs entering, crossing and leaving the frame, each with its own signature.
    margin = cfg.object_radius[1] + cfg.object_speed * cfg.frames
    n_obj = max(1, round(cfg.object_density * (height + 2 * margin) * (width + 2 * margin)))
    for _ in range(n_obj):
        r = float(_uniform(gen, *cfg.object_radius, 1))
        cy, cx = float(_uniform(gen, -margin, height + margin, 1)), float(_uniform(gen, -margin, width + margin, 1))
        vy, vx = (float(v) for v in _uniform(gen, -cfg.object_speed, cfg.object_speed, 2))
        dist = torch.sqrt((y[None, :, None] - cy - vy * t[:, None, None]) ** 2
                          + (x[None, None, :] - cx - vx * t[:, None, None]) ** 2)
        disc = _soft_step(r - dist, cfg.edge_softness)
        signature = torch.randn(cfg.sources - 4, generator=gen)
        src[3:-1] = src[3:-1] * (1 - disc) + signature[:, None, None, None] * disc
    src[-1] = 0.5 * _plane_waves(gen, t, y, x, 4, cfg.texture_wavelength, 0.5)
    return src


def video(cfg: DataConfig, height: int, width: int, seed: int) -> torch.Tensor:
    """Latent video `seed`, shape (128, frames, height, width): the sources mixed into the latent channels."""
    src = sources(cfg, height, width, seed)
    return torch.einsum("cs,sfhw->cfhw", mixing_matrix(cfg), src).contiguous()


def batch(cfg: DataConfig, size: int, height: int, width: int, seed: int) -> torch.Tensor:
    """`size` videos (size, 128, frames, height, width), video i seeded with `seed * 1009 + i`."""
    return torch.stack([video(cfg, height, width, seed * 1009 + i) for i in range(size)])
