"""ComfyUI's progress bar and interrupt, as the tile loops of the model patcher and the tiled decode use them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): tiles of a whole decode done, after each tile this process decodes."""


def check_interrupt(_tile: Any = None) -> None:
    """Raise ComfyUI's interrupt exception if the user pressed Cancel (called before every tile)."""
    import comfy.model_management

    comfy.model_management.throw_exception_if_processing_interrupted()


class TileProgress:
    """One progress bar over all tile passes of the sampling run: step s, tile i of T -> s * T + i."""

    def __init__(self, n_tiles: int, transformer_options: dict[str, Any]):
        self.n_tiles = n_tiles
        sigmas = transformer_options.get("sample_sigmas")
        current = transformer_options.get("sigmas")
        self.steps = max(len(sigmas) - 1, 1) if sigmas is not None else 1
        self.step = 0
        if sigmas is not None and current is not None:
            diffs = (sigmas[:-1].float().cpu() - float(current.flatten()[0])).abs()
            self.step = int(torch.argmin(diffs)) if diffs.numel() else 0
        self.bar = None
        if n_tiles > 1:
            import comfy.utils

            self.bar = comfy.utils.ProgressBar(self.steps * n_tiles)

    def tile_done(self, done: int, total: int, _tile: Any) -> None:
        if self.bar is not None:
            self.bar.update_absolute(self.step * self.n_tiles + done)

    def share(self, world: int) -> Callable[[int, int, Any], None]:
        """on_tile for a rank running 1/world of the tiles: its done-count stands for about world times as many."""
        return lambda done, total, tile: self.tile_done(min(done * world, self.n_tiles), self.n_tiles, tile)

    def finish(self) -> None:
        """Every tile of this call is blended (on every rank)."""
        self.tile_done(self.n_tiles, self.n_tiles, None)


def progress_bar() -> ProgressCallback:
    """A ProgressCallback that drives one ComfyUI progress bar (created at the first report)."""
    import comfy.utils

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = comfy.utils.ProgressBar(total)
        bar.update_absolute(done, total)

    return progress
