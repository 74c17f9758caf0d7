"""The template browser's thumbnail of an example workflow: a frame of its video, as the workflow made it on the tiny
models, with the LTX TDP Tile Preview node's tile panel drawn over it.

ComfyUI's frontend (1.48) shows a custom node pack's example workflow with the picture
`/api/workflow_templates/<pack folder>/<name>.jpg`, which ComfyUI serves from `example_workflows/<name>.jpg`, in a
square card. The thumbnail is square: the frame, scaled to the card's width, centred on a dark background.

The tile preview's picture (tiling/preview.py) starts with its spatial panel at `PANEL_MARGIN` px from the top left:
the frame's latent grid with every tile outlined in its colour, numbered, overlaps shaded darker, and a background
margin after it on the right and below. `tile_panel` cuts that panel out by its margins; `compose` multiplies the
frame by the panel's shading and paints the outlines and numbers over it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

PANEL_MARGIN = 8
"""Pixels between the tile preview picture's edge and its spatial panel (tiling/preview.py's _MARGIN)."""
BACKGROUND = 0.12
"""The tile preview's background grey (tiling/preview.py's _BACKGROUND)."""
SIZE = 512
"""The thumbnail's side in pixels."""
CARD_BACKGROUND = (24, 24, 27)
FRAME_DIM = 0.7
"""The frame is dimmed under the tile panel so that the outlines stand out (the tiny models' frames are noise)."""
CAPTION_PX = 30
"""Height of the caption's letters: the workflow's name, on the card above the picture, so that cards of frames that
all look alike (noise from random weights) still tell the workflows apart."""


def video_frame(path: Path, index: int | None = None) -> Image.Image:
    """Frame `index` of a video file (default: the middle one), as RGB."""
    import av

    with av.open(str(path)) as container:
        frames = [f.to_image() for f in container.decode(video=0)]
    if not frames:
        raise ValueError(f"{path} holds no video frame")
    return frames[len(frames) // 2 if index is None else index].convert("RGB")


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


def overlay(frame: Image.Image, panel: Image.Image) -> Image.Image:
    """The frame with the tile panel over it, at the panel's aspect ratio (the layout's frame size) and at least
    SIZE px wide: the panel's grey shading multiplies the dimmed frame (overlaps darker), its coloured outlines,
    numbers and their dark label boxes are painted."""
    factor = max(1, -(-SIZE // panel.width))
    panel = panel.resize((panel.width * factor, panel.height * factor), Image.NEAREST)
    f = np.asarray(frame.resize(panel.size, Image.BICUBIC), dtype=np.float32) / 255.0
    p = np.asarray(panel, dtype=np.float32) / 255.0
    saturated = (p.max(axis=-1) - p.min(axis=-1)) > 0.2
    label = p.max(axis=-1) < BACKGROUND + 0.05
    shade = np.clip(p.mean(axis=-1, keepdims=True) / 0.92, 0.0, 1.0)
    out = np.where((saturated | label)[..., None], p, f * shade * FRAME_DIM)
    return Image.fromarray((out.clip(0, 1) * 255).round().astype(np.uint8))


def compose(frame: Image.Image, preview: Image.Image | None, caption: str | None = None) -> Image.Image:
    """The square thumbnail: the frame (with the tile panel over it when a preview is given), scaled to the width,
    centred on a dark card, with `caption` written on the card above it (on a dark bar where the picture leaves no
    room)."""
    from PIL import ImageDraw, ImageFont

    picture = overlay(frame, tile_panel(preview)) if preview is not None else frame
    scale = SIZE / max(picture.size)
    picture = picture.resize((round(picture.width * scale), round(picture.height * scale)), Image.LANCZOS)
    card = Image.new("RGB", (SIZE, SIZE), CARD_BACKGROUND)
    top = (SIZE - picture.height) // 2
    card.paste(picture, ((SIZE - picture.width) // 2, top))
    if caption:
        draw = ImageDraw.Draw(card)
        font = ImageFont.load_default(size=CAPTION_PX)
        while draw.textlength(caption, font=font) > SIZE - 24 and font.size > 12:
            font = ImageFont.load_default(size=font.size - 2)
        band = CAPTION_PX + 20
        if top < band:
            draw.rectangle((0, 0, SIZE, band), fill=CARD_BACKGROUND)
        y = (max(top, band) - font.size) // 2  # centred in the card's band above the picture
        draw.text((SIZE // 2, y), caption, font=font, fill=(235, 235, 235), anchor="mt")
    return card


def write_thumbnail(path: Path, video: Path, preview: Path | None, caption: str | None = None) -> Path:
    """Compose the thumbnail of `video` (its middle frame), the tile preview picture at `preview` and `caption`; save
    it as JPEG."""
    image = compose(video_frame(video), Image.open(preview) if preview is not None else None, caption)
    image.save(path, "JPEG", quality=88)
    return path
