"""The template browser's thumbnail of an example workflow: the main job's before and after, with the workflow's own
tile layout drawn over the after, under the workflow's name.

ComfyUI's frontend (1.48) shows a custom node pack's example workflow with the picture
`/api/workflow_templates/<pack folder>/<name>.jpg`, which ComfyUI serves from `example_workflows/<name>.jpg`, in a
square card. The card (SIZE px): the workflow's name on top; two square panels, the quality benchmark's trained LTXV
refining a video twice its trained size (ltx_tdp_devkit.quality_example) untiled (left) and with TDP (right, with the
workflow's tile layout: the LTX TDP Tile Preview picture's spatial panel for its tile config); each panel's PSNR
against the ground truth under it; a footnote saying what the panels are.

The tile preview's picture (tiling/preview.py) starts with its spatial panel at `PANEL_MARGIN` px from the top left:
the frame's latent grid with every tile outlined in its colour, numbered, overlaps shaded darker, and a background
margin after it on the right and below. `tile_panel` cuts that panel out by its margins; `overlay` paints its outlines
and numbers over the picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PANEL_MARGIN = 8
"""Pixels between the tile preview picture's edge and its spatial panel (tiling/preview.py's _MARGIN)."""
BACKGROUND = 0.12
"""The tile preview's background grey (tiling/preview.py's _BACKGROUND)."""
SIZE = 512
"""The thumbnail's side in pixels."""
CARD_BACKGROUND = (24, 24, 27)
TEXT = (235, 235, 235)
CAPTION_PX = 30
"""Height of the caption's letters: the workflow's name, on the card above the pictures, so that cards whose pictures
look alike still tell the workflows apart."""
LABEL_PX = 20
FOOTNOTE_PX = 15
JPEG_QUALITY = 90
PANEL_PX = 244
"""Side of each of the two square panels."""
PANELS_TOP = 96
"""Row at which the panels start; the caption is centred in the band above."""


def tile_panel(preview: Image.Image) -> Image.Image:
    """The spatial tile panel of a tile preview picture: from PANEL_MARGIN to the first column and the first row that
    hold nothing but background."""
    rgb = np.asarray(preview.convert("RGB"), dtype=np.float32) / 255.0
    background = (np.abs(rgb - BACKGROUND) < 2 / 255).all(axis=-1)
    m = PANEL_MARGIN
    empty_cols = [x for x in range(m + 1, rgb.shape[1]) if background[m:, x].all()]
    if not empty_cols:
        raise ValueError("no margin after the tile panel: not a tile preview picture")
    right = empty_cols[0]
    empty_rows = [y for y in range(m + 1, rgb.shape[0]) if background[y, m:right].all()]
    bottom = empty_rows[0] if empty_rows else rgb.shape[0]
    return preview.convert("RGB").crop((m, m, right, bottom))


def _upscaled(picture: Image.Image, width: int) -> Image.Image:
    """The picture scaled by a whole factor (nearest: latent cells stay sharp squares) to at least `width` px wide."""
    factor = max(1, -(-width // picture.width))
    return picture.convert("RGB").resize((picture.width * factor, picture.height * factor), Image.NEAREST)


def overlay(picture: Image.Image, panel: Image.Image) -> Image.Image:
    """The picture with the tile panel's coloured outlines, numbers and their dark label boxes painted over it, at the
    panel's aspect ratio (the layout's frame size) and at least SIZE px wide."""
    panel = _upscaled(panel, SIZE)
    f = np.asarray(picture.convert("RGB").resize(panel.size, Image.NEAREST), dtype=np.float32) / 255.0
    p = np.asarray(panel, dtype=np.float32) / 255.0
    saturated = (p.max(axis=-1) - p.min(axis=-1)) > 0.2
    label = p.max(axis=-1) < BACKGROUND + 0.05
    out = np.where((saturated | label)[..., None], p, f)
    return Image.fromarray((out.clip(0, 1) * 255).round().astype(np.uint8))


def _font(size: int, text: str, width: int, draw: ImageDraw.ImageDraw) -> ImageFont.FreeTypeFont:
    """Pillow's default font at `size` px, smaller until `text` fits in `width` px."""
    font = ImageFont.load_default(size=size)
    while draw.textlength(text, font=font) > width and font.size > 10:
        font = ImageFont.load_default(size=font.size - 1)
    return font


def before_after(before: Image.Image, after: Image.Image, preview: Image.Image | None, caption: str,
                 labels: tuple[str, str], footnote: str) -> Image.Image:
    """The square card: `caption` on top, `before` and `after` (with the tile panel of `preview` over it, when given)
    side by side as PANEL_PX squares, `labels` under them, `footnote` at the bottom."""
    after = overlay(after, tile_panel(preview)) if preview is not None else _upscaled(after, SIZE)
    before = _upscaled(before, SIZE)
    card = Image.new("RGB", (SIZE, SIZE), CARD_BACKGROUND)
    draw = ImageDraw.Draw(card)
    gap = (SIZE - 2 * PANEL_PX) // 3
    top = PANELS_TOP
    font = _font(CAPTION_PX, caption, SIZE - 24, draw)
    draw.text((SIZE // 2, (top - CAPTION_PX) // 2), caption, font=font, fill=TEXT, anchor="mt")
    for i, (picture, label) in enumerate(((before, labels[0]), (after, labels[1]))):
        x = gap + i * (PANEL_PX + gap)
        card.paste(picture.convert("RGB").resize((PANEL_PX, PANEL_PX), Image.LANCZOS), (x, top))
        font = _font(LABEL_PX, label, PANEL_PX, draw)
        draw.text((x + PANEL_PX // 2, top + PANEL_PX + 12), label, font=font, fill=TEXT, anchor="mt")
    for k, line in enumerate(footnote.split("\n")):
        font = _font(FOOTNOTE_PX, line, SIZE - 20, draw)
        y = top + PANEL_PX + 12 + LABEL_PX + 28 + k * (FOOTNOTE_PX + 7)
        draw.text((SIZE // 2, y), line, font=font, fill=(170, 170, 175), anchor="mt")
    return card


def example_thumbnail(result: Any, caption: str) -> Image.Image:
    """The card of an example workflow from a main-job result (quality_example.ExampleResult, refined with the
    workflow's tile counts and overlap), that result's tile layout drawn over its TDP panel."""
    from ltx_tdp.bench.quality.render import to_rgb
    from ltx_tdp.tiling import AxisTiling, TileCountConfig
    from ltx_tdp.tiling.preview import preview_tiles

    from .quality_example import example_config

    cfg = example_config()
    gt = result.latents["ground truth"]

    def picture(name: str) -> Image.Image:
        return Image.fromarray((to_rgb(cfg, result.latents[name], gt) * 255).round().byte().numpy())

    (h, w), overlap = result.case.tiles, result.case.overlap
    tiling = TileCountConfig(height=AxisTiling(h, overlap if h > 1 else 0), width=AxisTiling(w, overlap if w > 1 else 0))
    preview = Image.fromarray((preview_tiles(tuple(gt.shape[1:]), tiling).image * 255).round().byte().numpy())
    trained, n = cfg.train.model.max_cells, cfg.cells
    labels = (f"untiled: {result.psnrs['untiled']:.1f} dB", f"TDP {h} x {w}: {result.psnrs['tdp']:.1f} dB")
    footnote = (f"a small trained LTX model refines a {n} x {n} latent,\n"
                f"twice its trained {trained} x {trained} (PSNR against the ground truth)")
    return before_after(picture("untiled"), picture("tdp"), preview, caption, labels, footnote)


def write_thumbnail(path: Path, image: Image.Image) -> Path:
    """Save a card as the JPEG the template browser fetches."""
    image.save(path, "JPEG", quality=JPEG_QUALITY)
    return path
