"""The example thumbnails: the tile panel is cut out of a real tile preview picture exactly, and drawn over a frame."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ltx_tdp_devkit.thumbnails import PANEL_MARGIN, SIZE, compose, tile_panel


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


@pytest.mark.parametrize("shape", [(2, 8, 12), (16, 68, 120)], ids=["tiny", "4k"])
def test_tile_panel_is_the_previews_spatial_panel(shape):
    picture, size = _preview(shape)
    panel = tile_panel(picture)
    assert panel.size == size, f"cut {panel.size}, the panel of a {shape[1]} x {shape[2]} grid is {size}"


def test_thumbnail_is_square_with_the_frame_under_the_tile_outlines():
    picture, _ = _preview((2, 8, 12))
    frame = Image.new("RGB", (384, 256), (200, 200, 200))
    thumb = compose(frame, picture)
    assert thumb.size == (SIZE, SIZE), thumb.size
    pixels = np.asarray(thumb).reshape(-1, 3).astype(int)
    saturated = ((pixels.max(axis=1) - pixels.min(axis=1)) > 100).mean()
    grey = ((pixels.max(axis=1) - pixels.min(axis=1)) < 10) & (pixels.mean(axis=1) > 60)
    assert saturated > 0.005, f"{saturated:.4f} of the pixels are tile outline colours"
    assert grey.mean() > 0.3, f"{grey.mean():.3f} of the pixels show the (dimmed) frame"


def test_the_caption_is_written_above_the_picture_and_nowhere_else():
    frame = Image.new("RGB", (384, 216), (0, 0, 0))
    plain, captioned = compose(frame, None), compose(frame, None, "LTX-2.5 4K two-stage with TDP")
    changed = np.abs(np.asarray(captioned, dtype=int) - np.asarray(plain, dtype=int)).max(axis=-1) > 40
    rows = np.nonzero(changed.any(axis=1))[0]
    top = (SIZE - round(216 * SIZE / 384)) // 2
    assert rows.size, "the caption left no mark"
    assert rows.max() < top, f"the caption reaches row {rows.max()}, into the picture (it starts at row {top})"
