"""ComfyUI's progress bar and interrupt, as the tile loops of the model patcher and the tiled decode use them
(`interruptible`: the one way a tile loop honours Cancel and reports its tiles)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..tiling import Tile
from ..tiling.ranks import BeforeTile, Partial

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): tiles of a whole loop done, after each tile this process runs."""

TileLoop = Callable[[int, int, Callable[[Tile], None], Callable[[int, int, Tile], None]], torch.Tensor]
"""run(rank, world, before_tile, on_tile) -> that rank's window-weighted sum (`tiling.blend_tiles` with these
hooks)."""


def check_interrupt(_tile: Any = None) -> None:
    """Raise ComfyUI's interrupt exception if the user pressed Cancel (called before every tile)."""
    import comfy.model_management

    comfy.model_management.throw_exception_if_processing_interrupted()


def interruptible(run: TileLoop, progress: ProgressCallback | None, total: int) -> Partial:
    """The `partial` a tile loop of `total` tiles hands its ranks (`tiling.ranks`): `run` with ComfyUI's interrupt
    checked before every tile (then the ranks' own `before_tile`) and `progress(done, total)` told after each,
    a rank's count of done tiles standing for `world` times as many."""

    def partial(rank: int, world: int, before_tile: BeforeTile) -> torch.Tensor:
        def before(tile: Tile) -> None:
            check_interrupt()
            if before_tile is not None:
                before_tile(tile)

        def on_tile(done: int, _total: int, _tile: Tile) -> None:
            if progress is not None:
                progress(min(done * world, total), total)

        return run(rank, world, before, on_tile)

    return partial


class TileProgress:
    """One progress bar over all tile passes of the sampling run (a ProgressCallback for one model call's tiles):
    step s, tile i of T -> s * T + i."""

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

    def __call__(self, done: int, total: int) -> None:
        """`done` of this call's tiles are blended."""
        if self.bar is not None:
            self.bar.update_absolute(self.step * self.n_tiles + done)

    def finish(self) -> None:
        """Every tile of this call is blended (on every rank)."""
        self(self.n_tiles, self.n_tiles)


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
