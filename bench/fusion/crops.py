"""fusion_<sampler>.png: every method's output beside the ground truth, cropped across the pack's seam."""

from __future__ import annotations

from pathlib import Path

from ..quality.render import pyplot as _plt, to_rgb
from .config import FusionConfig
from .methods import UNTILED, grids, methods, short_label
from .sweep import Results, edges, mean


def plot_crops(cfg: FusionConfig, res: Results, sampler: str, path: Path) -> None:
    """Ground truth and every method's output, cropped across the pack's seam, with |error| maps below."""
    case = cfg.cases()[0]
    ex = res.examples.get((case.name, sampler))
    if not ex:
        return
    plt = _plt()
    n, half = case.cells, cfg.crop // 2
    cut = (n + cfg.overlap) // 2
    lo = max(0, min(n - cfg.crop, cut - half))
    window = (slice(None), slice(None), slice(lo, lo + cfg.crop), slice(lo, lo + cfg.crop))
    gt = ex["ground truth"][window]
    cols = ["ground truth", *methods(cfg, n)]
    errs = {m: (ex[m][window] - gt).abs().mean(dim=0)[-1] for m in methods(cfg, n)}
    vmax = max(float(e.max()) for e in errs.values())
    fig, axes = plt.subplots(2, len(cols), figsize=(1.6 * len(cols), 4.3))
    for j, name in enumerate(cols):
        axes[0, j].imshow(to_rgb(cfg, ex[name][window], gt), interpolation="nearest")
        axes[0, j].set_title(short_label(cfg, name) if name in errs else name, fontsize=7)
        if name in errs:
            axes[1, j].imshow(errs[name], cmap="magma", vmin=0, vmax=vmax, interpolation="nearest")
            psnr = mean(res.rows, "psnr", case=case.name, sampler=sampler, method=name)
            axes[1, j].set_title(f"|error| ({psnr:.2f} dB)", fontsize=7)
            rows, cols_ = edges(grids(cfg, name, n, n), n) if name not in UNTILED else ((), ())
            for ax in axes[:, j]:
                for e in rows:
                    if lo < e < lo + cfg.crop:
                        ax.axhline(e - lo - 0.5, color="cyan", lw=0.5, ls="--")
                for e in cols_:
                    if lo < e < lo + cfg.crop:
                        ax.axvline(e - lo - 0.5, color="cyan", lw=0.5, ls="--")
        else:
            axes[1, j].axis("off")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{sampler}, sigmas {', '.join(f'{x:g}' for x in cfg.sigmas)}: cells {lo}..{lo + cfg.crop - 1} of "
                 f"{n} (2S), last latent frame", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
