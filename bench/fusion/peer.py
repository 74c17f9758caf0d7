"""Lightricks' LTXV Tiled Fusion Sampler, rebuilt for the benchmark from its public description (not its code).

What the description says, and how it is rebuilt here:

* one latent canvas and one noise field; at every sigma pair each tile (a fixed size, neighbours overlapping by
  at least half a tile) is stepped on its own by the sampler's step function: here the sampler function of any
  KSamplerSelect SAMPLER, called on the tile's crop of the canvas with the two sigmas, so a history sampler
  starts afresh at every step and an ancestral one draws its own noise per tile (a seed per tile and step);
* the stepped tiles are merged with separable Gaussian weights (variance 0.05 over the tile's extent, no floor)
  divided by their sum;
* video latents only (5-D, batch 1). Its grid shift between steps is measured on the pack instead (`shifted`).

Tile placement is not in the description: tiles start every (tile - overlap) cells from 0 and the last one is
moved back to end at the frame's edge. The model sees each tile as its own latent (LTX gives a smaller latent
positions from 0). Everything runs through ComfyUI's public SAMPLER interface (`comfy.samplers.KSAMPLER`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ...tiling import window_1d
from .config import PEER_VARIANCE, PeerTile
from .shifted import shifted_tiling

Weighted = tuple[slice, slice, torch.Tensor]
"""One tile of an (H, W) frame: its rows, its columns and its (unnormalised) merge weights, fp32."""
Layout = Callable[[int, int], list[Weighted]]
"""The tiles of an H x W frame and their weights (each tile holds every latent frame)."""


def gaussian_1d(length: int) -> torch.Tensor:
    """The peer's weights along one axis of a tile: exp(-(u - 1/2)^2 / (2 * 0.05)) at the cell centres
    u = (i + 1/2) / length; no floor (exp(-2.5) = 0.08 at the very edge)."""
    u = (torch.arange(length, dtype=torch.float64) + 0.5) / length
    return torch.exp(-(u - 0.5) ** 2 / (2 * PEER_VARIANCE)).float()


def peer_starts(length: int, tile: int, overlap: int) -> tuple[int, ...]:
    """Starts of the peer's tiles along one axis: every `tile - overlap` cells from 0, the last one moved back to
    end exactly at `length`; one tile when it covers the axis. Invariant: the tiles cover [0, length)."""
    if tile >= length:
        return (0,)
    starts = list(range(0, length - tile, tile - overlap)) + [length - tile]
    return tuple(starts)


def peer_layout(height: int, width: int, tile: PeerTile) -> list[Weighted]:
    """The peer's fixed-size tiles over an H x W frame with its Gaussian weights."""
    out = []
    for y in peer_starts(height, tile.height, tile.overlap_h):
        for x in peer_starts(width, tile.width, tile.overlap_w):
            hs, ws = slice(y, min(y + tile.height, height)), slice(x, min(x + tile.width, width))
            out.append((hs, ws, gaussian_1d(hs.stop - hs.start)[:, None] * gaussian_1d(ws.stop - ws.start)[None, :]))
    return out


def pack_layout(height: int, width: int, tiles: tuple[int, int], overlap: int, window: str,
                shift: int = 0) -> list[Weighted]:
    """The pack's tiles (LTX TDP Tile Config's split, its boundaries moved by `shift` as in `shifted`) with the
    peer's Gaussian weights or the pack's own trapezoid windows (`window` "gaussian" or "trapezoid")."""
    tiling = shifted_tiling(tiles, overlap, shift)
    rows, cols = tiling.height.intervals(height, "height"), tiling.width.intervals(width, "width")
    weight = {"gaussian": lambda i: gaussian_1d(i.length), "trapezoid": window_1d}[window]
    return [(r.slice, c.slice, weight(r)[:, None] * weight(c)[None, :]) for r in rows for c in cols]


def layout_of(kind: str, **settings: Any) -> Layout:
    """A Layout: "peer" (settings: tile) or "pack" (settings: tiles, overlap, window)."""
    return functools.partial({"peer": peer_layout, "pack": pack_layout}[kind], **settings)


def mixing(tiles: list[Weighted], height: int, width: int) -> torch.Tensor:
    """1 - sum_i w_i^2 per cell, w_i the normalised weights: the share of independent per-tile noise the merge
    averages away (0 where one tile decides, 1/2 where two tiles weigh half each)."""
    total = torch.zeros(height, width, dtype=torch.float64)
    for hs, ws, w in tiles:
        total[hs, ws] += w
    squares = torch.zeros_like(total)
    for hs, ws, w in tiles:
        squares[hs, ws] += (w / total[hs, ws]) ** 2
    return (1 - squares).float()


def tiled_fusion_sampler(inner: Any, layout: Layout) -> Any:
    """`ltxv_tiled_fusion`: a SAMPLER that steps every tile of `layout` on its own with `inner` (a KSamplerSelect
    SAMPLER) between each pair of sigmas and merges the stepped tiles by their weights over the weights' sum.

    Invariant: the canvas after each step is a convex combination of the tiles' stepped crops at every cell;
    tile k at step i samples with seed (run seed + 1 + i * tiles + k), so ancestral noise is independent per
    tile and step. Raises ValueError for anything but a 5-D batch-1 latent without a noise mask.
    """
    import comfy.samplers
    from tqdm.auto import trange

    def sample(model, x, sigmas, extra_args=None, callback=None, disable=None):
        extra_args = dict(extra_args or {})
        if x.ndim != 5 or x.shape[0] != 1:
            raise ValueError(f"ltxv_tiled_fusion takes video latents of batch 1 (B, C, F, H, W); got {tuple(x.shape)}")
        if extra_args.get("denoise_mask") is not None:
            raise ValueError("ltxv_tiled_fusion (as rebuilt here) takes no noise mask")
        tiles = layout(x.shape[-2], x.shape[-1])
        total = torch.zeros(x.shape[-2:], dtype=torch.float64, device=x.device)
        for hs, ws, w in tiles:
            total[hs, ws] += w.to(x.device)
        seed = int(extra_args.get("seed") or 0)
        for i in trange(len(sigmas) - 1, disable=disable):
            stepped = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
            denoised = torch.zeros_like(stepped)
            for k, (hs, ws, w) in enumerate(tiles):
                seen: dict = {}
                args = {**extra_args, "seed": seed + 1 + i * len(tiles) + k}
                out = inner.sampler_function(model, x[..., hs, ws].contiguous(), sigmas[i:i + 2], extra_args=args,
                                             callback=seen.update, disable=True, **inner.extra_options)
                w = w.to(device=x.device, dtype=torch.float64)
                stepped[..., hs, ws] += out.double() * w
                denoised[..., hs, ws] += seen["denoised"].double() * w
            if callback is not None:
                callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i],
                          "denoised": (denoised / total).to(x.dtype)})
            x = (stepped / total).to(x.dtype)
        return x

    return comfy.samplers.KSAMPLER(sample)
