"""How the quality benchmark shows a latent video: three of its sources as RGB, tile edges, and the main job's picture.

A latent has 128 channels; the synthetic videos mix 6 source maps into them with one fixed matrix (data.py), so the
pseudo-inverse of that matrix takes a latent back to its sources. `to_rgb` shows the smooth field, the objects and the
edges as red, green and blue, each scaled to the ground truth's range: every panel of a figure uses the same scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ...tiling import AxisTiling
from . import data
from .config import BenchConfig, Case
from .sweep import borders_of

SOURCES_AS_RGB = (0, 3, 2)
"""The sources shown as red, green, blue: the first smooth field, the first object source, the edges."""
RGB_LEGEND = "Colours: the latent's smooth field / objects / edges as R / G / B (unmixed from its 128 channels)"


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_rgb(cfg: BenchConfig, latent: torch.Tensor, ref: torch.Tensor, frame: int = -1) -> torch.Tensor:
    """A latent (C, F, H, W) shown as RGB: its smooth field, object and edge sources (unmixed with the pseudo-
    inverse of the fixed mixing), each scaled to the ground truth's range. (H, W, 3) in [0, 1]."""
    pinv = torch.linalg.pinv(data.mixing_matrix(cfg.train.data))
    pick = list(SOURCES_AS_RGB)
    src = torch.einsum("sc,chw->shw", pinv, latent[:, frame].float())[pick]
    ref_src = torch.einsum("sc,chw->shw", pinv, ref[:, frame].float())[pick]
    lo = ref_src.amin(dim=(1, 2), keepdim=True)
    hi = ref_src.amax(dim=(1, 2), keepdim=True)
    return ((src - lo) / (hi - lo + 1e-8)).clamp(0, 1).permute(1, 2, 0)


def draw_borders(ax, borders: tuple[Sequence[int], Sequence[int]], n: int, lw: float = 0.6) -> None:
    """Tile edges (between cells e - 1 and e) as cyan dashed lines on an n x n image axis."""
    for e in borders[0]:
        ax.axhline(e - 0.5, color="cyan", lw=lw, ls="--")
    for e in borders[1]:
        ax.axvline(e - 0.5, color="cyan", lw=lw, ls="--")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)


def example_figure(cfg: BenchConfig, case: Case, latents: dict[str, torch.Tensor], psnrs: dict[str, float],
                   path: Path, frame: int = -1) -> Path:
    """The main job's picture: ground truth | untiled | TDP (top), the noisy input and both |error| maps with their
    PSNR against the ground truth (bottom). `latents` holds "ground truth", "noisy input", "untiled" and "tdp",
    each (C, F, H, W). One colour projection and one error scale for every panel; TDP's tile edges drawn."""
    plt = pyplot()
    gt = latents["ground truth"]
    n = gt.shape[-1]
    trained = cfg.train.model.max_cells
    tiles = f"TDP {case.tiles[0]} x {case.tiles[1]} tiles, overlap {case.overlap}"
    tile = max(iv.end - iv.start for t in case.tiles for iv in AxisTiling(t, case.overlap if t > 1 else 0).intervals(n))
    errors = {k: (latents[k] - gt).abs().mean(dim=0)[frame] for k in ("untiled", "tdp")}
    vmax = max(float(e.max()) for e in errors.values())
    fig, axes = plt.subplots(2, 3, figsize=(11.5, 8.6))
    top = [("ground truth", "ground truth"), ("untiled", "untiled (one model call sees the whole frame)"),
           ("tdp", tiles)]
    for ax, (key, title) in zip(axes[0], top):
        ax.imshow(to_rgb(cfg, latents[key], gt, frame), interpolation="nearest")
        ax.set_title(title, fontsize=10)
        if key == "tdp":
            draw_borders(ax, borders_of(n, case.tiles, case.overlap), n, lw=1.0)
    axes[1, 0].imshow(to_rgb(cfg, latents["noisy input"], gt, frame), interpolation="nearest")
    axes[1, 0].set_title(f"input: ground truth noised to sigma {case.sigmas[0]:g}", fontsize=10)
    for ax, key, name in ((axes[1, 1], "untiled", "untiled"), (axes[1, 2], "tdp", "TDP")):
        im = ax.imshow(errors[key], cmap="magma", vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"|error| of {name}: PSNR {psnrs[key]:.1f} dB", fontsize=10)
        if key == "tdp":
            draw_borders(ax, borders_of(n, case.tiles, case.overlap), n, lw=1.0)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.subplots_adjust(left=0.02, right=0.91, top=0.83, bottom=0.02, wspace=0.06, hspace=0.12)
    fig.colorbar(im, cax=fig.add_axes([0.925, 0.04, 0.012, 0.36]), label="mean |error| over the 128 channels")
    fig.suptitle(f"A video twice the model's trained size: untiled {psnrs['untiled']:.1f} dB, "
                 f"LTX TDP {psnrs['tdp']:.1f} dB (PSNR against the ground truth, higher is closer)", fontsize=12.5, y=0.98)
    lines = (f"Model: ComfyUI's LTXVModel, {cfg.train.model.num_layers} layers, trained here on synthetic latent videos "
             f"of up to {trained} x {trained} latent cells.",
             f"Outside its trained range: this video is {n} x {n} cells, so untiled the model sees positions twice "
             f"as far as in training. TDP's tiles: {tile} x {tile}.",
             f"Noised to sigma {case.sigmas[0]:g}, refined by SamplerCustomAdvanced (euler: "
             f"{', '.join(f'{s:g}' for s in case.sigmas)}); the last latent frame is shown.", RGB_LEGEND + ".")
    for k, line in enumerate(lines):
        fig.text(0.5, 0.935 - 0.023 * k, line, ha="center", fontsize=9.5 if k < 2 else 8.5,
                 color="0" if k < 2 else "0.3")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
