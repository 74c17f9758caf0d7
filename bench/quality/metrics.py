"""Image-quality figures on latent videos (C, F, H, W): PSNR, PSNR in a band around tile borders, seam score,
high-pass (texture and noise) energy.

Tile borders are where a tile's support starts or ends inside the frame (both edges of every overlap;
the cut itself when tiles do not overlap), taken from the pack's own interval split, so the figures look
exactly where each method's tiles meet. Pure torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...tiling import AxisTiling


def border_positions(length: int, tiles: int, overlap: int) -> tuple[int, ...]:
    """Interior tile edges on one axis: e such that a tile starts at e or ends at e, 0 < e < length.

    An edge e lies between cells e - 1 and e.
    """
    edges = set()
    for interval in AxisTiling(tiles, overlap).intervals(length):
        edges.update((interval.start, interval.end))
    return tuple(sorted(e for e in edges if 0 < e < length))


def band_mask(shape: tuple[int, int], borders: tuple[Sequence[int], Sequence[int]], half_width: int) -> torch.Tensor:
    """Boolean (H, W) mask of cells within `half_width` cells of a border (cells e - hw .. e + hw - 1)."""
    mask = torch.zeros(shape, dtype=torch.bool)
    for axis, edges in enumerate(borders):
        for e in edges:
            lo, hi = max(e - half_width, 0), min(e + half_width, shape[axis])
            if axis == 0:
                mask[lo:hi, :] = True
            else:
                mask[:, lo:hi] = True
    return mask


def psnr(x: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """10 log10(peak^2 / MSE) with peak = ref.max() - ref.min(), MSE over the (H, W) `mask` if given (dB)."""
    err = (x.float() - ref.float()) ** 2
    if mask is not None:
        err = err[..., mask]
    mse = float(err.mean())
    peak = float(ref.max() - ref.min())
    return float("inf") if mse == 0 else 10.0 * torch.log10(torch.tensor(peak * peak / mse)).item()


def seam_score(x: torch.Tensor, borders: tuple[Sequence[int], Sequence[int]]) -> float:
    """Mean |gradient| across tile borders over mean |gradient| everywhere else (1.0: no visible seam).

    Gradients are differences of neighbouring cells along H (for height borders) and W (for width
    borders), in absolute value, averaged over channels and frames. The gradients that cross a border are
    the difference between cells e - 1 and e; every other difference along either axis is "elsewhere".
    """
    x = x.float()
    gh = (x[..., 1:, :] - x[..., :-1, :]).abs().mean(dim=tuple(range(x.ndim - 2)))  # (H-1, W); row e-1 crosses e
    gw = (x[..., :, 1:] - x[..., :, :-1]).abs().mean(dim=tuple(range(x.ndim - 2)))  # (H, W-1)
    on_h = torch.zeros(gh.shape[0], dtype=torch.bool)
    on_w = torch.zeros(gw.shape[1], dtype=torch.bool)
    for e in borders[0]:
        on_h[e - 1] = True
    for e in borders[1]:
        on_w[e - 1] = True
    across = torch.cat([gh[on_h].flatten(), gw[:, on_w].flatten()])
    rest = torch.cat([gh[~on_h].flatten(), gw[:, ~on_w].flatten()])
    if across.numel() == 0 or rest.numel() == 0:
        return 1.0
    return float(across.mean() / rest.mean())


def highpass_energy(x: torch.Tensor) -> torch.Tensor:
    """(H, W) map: the mean over the leading axes of (x - its 3 x 3 box mean)^2, edges replicated: the fine
    texture and noise a cell carries (0 on a constant; on a linear ramp, 0 away from the frame's edge)."""
    x = x.float().reshape(-1, 1, *x.shape[-2:])
    mean = torch.nn.functional.avg_pool2d(torch.nn.functional.pad(x, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    return ((x - mean) ** 2).mean(dim=(0, 1))
