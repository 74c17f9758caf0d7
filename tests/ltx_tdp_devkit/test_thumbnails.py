"""The example thumbnails: the tile panel is cut out of a real tile preview picture exactly, and the card shows the
before and after side by side, the tile outlines on the after only, the workflow's name above them."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ltx_tdp_devkit.thumbnails import PANEL_MARGIN, PANEL_PX, PANELS_TOP, SIZE, before_after, tile_panel


def _preview(shape: tuple[int, int, int]) -> tuple[Image.Image, tuple[int, int]]:
    """The tile preview picture of 2 x 2 tiles on a latent of `shape`, and its spatial panel's size (w, h): the
    picture is three margins and two panels wide (tiling/preview.py)."""
    from ltx_tdp.tiling import TileCountConfig
    from ltx_tdp.tiling.config import AxisTiling
    from ltx_tdp.tiling.preview import preview_tiles

    preview = preview_tiles(shape, TileCountConfig(height=AxisTiling(2, 2), width=AxisTiling(2, 2)))
    panel_w = (preview.image.shape[1] - 3 * PANEL_MARGIN) // 2
    cell = panel_w // shape[2]
    rgb = (preview.image.numpy() * 255).round().astype(np.uint8)
    return Image.fromarray(rgb), (panel_w, shape[1] * cell)


@pytest.mark.parametrize("shape", [(2, 8, 12), (16, 68, 120), (2, 32, 32)], ids=["tiny", "4k", "main-job"])
def test_tile_panel_is_the_previews_spatial_panel(shape):
    picture, size = _preview(shape)
    panel = tile_panel(picture)
    assert panel.size == size, f"cut {panel.size}, the panel of a {shape[1]} x {shape[2]} grid is {size}"


def _saturated(pixels: np.ndarray) -> float:
    """Fraction of strongly coloured pixels (tile outline colours; the panels here are grey)."""
    p = pixels.reshape(-1, 3).astype(int)
    return float(((p.max(axis=1) - p.min(axis=1)) > 100).mean())


def test_card_is_square_with_the_tile_outlines_on_the_after_panel_only():
    picture, _ = _preview((2, 32, 32))
    grey = Image.new("RGB", (32, 32), (200, 200, 200))
    card = np.asarray(before_after(grey, grey, picture, "name", ("before", "after"), "footnote"))
    assert card.shape == (SIZE, SIZE, 3), card.shape
    gap = (SIZE - 2 * PANEL_PX) // 3
    top = PANELS_TOP
    before = card[top:top + PANEL_PX, gap:gap + PANEL_PX]
    after = card[top:top + PANEL_PX, 2 * gap + PANEL_PX:2 * gap + 2 * PANEL_PX]
    assert _saturated(before) == 0.0, f"{_saturated(before):.4f} of the before panel is outline colour"
    assert _saturated(after) > 0.005, f"{_saturated(after):.4f} of the after panel is outline colour"
    shown = (np.abs(after.astype(int) - 200).max(axis=-1) < 10).mean()
    assert shown > 0.5, f"{shown:.3f} of the after panel shows the picture under the outlines"


def test_the_caption_is_written_above_the_panels_and_nowhere_else():
    black = Image.new("RGB", (32, 32), (0, 0, 0))
    plain = np.asarray(before_after(black, black, None, "", ("", ""), ""), dtype=int)
    captioned = np.asarray(before_after(black, black, None, "LTX-2.5 4K two-stage with TDP", ("", ""), ""), dtype=int)
    rows = np.nonzero((np.abs(captioned - plain).max(axis=-1) > 40).any(axis=1))[0]
    top = PANELS_TOP
    assert rows.size, "the caption left no mark"
    assert rows.max() < top, f"the caption reaches row {rows.max()}, into the panels (they start at row {top})"
