"""A picture of a tile plan: tile outlines, overlaps, window profiles and the blend-weight sum.

Pure torch, no image library: the picture is an fp32 (height, width, 3) tensor in [0, 1], drawn with
rectangle fills and a 3 x 5 pixel digit font. It is drawn from the very `TilePlan` that the patcher and
the tiled decode blend with, and its heat map is that plan's `weight_sum()`: a layout that blends exactly
shows one flat colour (`EXACT_COLOUR`); any cell off by more than `EXACT_TOLERANCE` shows yellow to red
(above one) or cyan to blue (below one).

Layout of the picture (latent cells drawn as `cell_px` squares):

    [ height x width: tiles, overlaps shaded ]   [ height x width: weight-sum heat map ]
    [ frames: one window profile per time tile, then the weight-sum heat strip           ]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import TilingConfig
from .geometry import LTX_GEOMETRY, VIDEO_AXES
from .intervals import Interval
from .plan import TilePlan, plan_tiles
from .position_range import PositionRange, largest_tile
from .windows import window_1d

EXACT_TOLERANCE = 1e-6
"""A weight sum within this of one counts as exact (fp32 rounding of the ramps k/(r+1))."""

EXACT_COLOUR = (0.22, 0.62, 0.34)
"""Heat-map colour of a cell whose blend weights sum to one."""

_BACKGROUND = 0.12
_MARGIN = 8
_BAR_PX = 14
_TARGET_PANEL_PX = 640

_DIGITS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111",
}


@dataclass(frozen=True)
class TilePreview:
    """A rendered tile plan: the picture, the weight sum it shows and a text summary."""

    image: torch.Tensor
    """(height, width, 3) fp32 in [0, 1]."""
    weight_sum: torch.Tensor
    """(frames, height, width) fp32: the plan's blend-weight sum at every latent cell."""
    plan: TilePlan
    summary: str

    @property
    def max_deviation(self) -> float:
        """Largest |weight sum - 1| over the grid."""
        return float((self.weight_sum - 1.0).abs().max())


def preview_tiles(shape: Sequence[int], tiling: TilingConfig, cell_px: int | None = None,
                  positions: PositionRange | None = None) -> TilePreview:
    """Plan `tiling` on a (frames, height, width) latent exactly as the TDP patcher does and draw it; the summary
    checks the largest tile against `positions` (the model's trained range) when given.

    Raises the patcher's TilingError (same message) for a layout it would refuse.
    """
    return render_plan(plan_tiles(tuple(shape), tiling.axes, VIDEO_AXES), cell_px, positions)


def render_plan(plan: TilePlan, cell_px: int | None = None, positions: PositionRange | None = None) -> TilePreview:
    """Draw a 3-axis (frames, height, width) plan; see the module docstring for the layout."""
    if len(plan.shape) != 3:
        raise ValueError(f"the preview draws (frames, height, width) plans, got a {len(plan.shape)}-axis one")
    n_f, n_h, n_w = plan.shape
    s = cell_px or max(1, min(16, _TARGET_PANEL_PX // max(n_h, n_w)))
    panel_h, panel_w = n_h * s, n_w * s
    weight_sum = plan.weight_sum()
    deviation = weight_sum - 1.0

    f_iv, h_iv, w_iv = plan.axis_intervals
    strip_w = max(panel_w, 2 * _BAR_PX)
    strip_h = (len(f_iv) + 1) * (_BAR_PX + 2)
    width = 3 * _MARGIN + 2 * panel_w
    height = 3 * _MARGIN + panel_h + strip_h + _MARGIN
    img = torch.full((height, width, 3), _BACKGROUND, dtype=torch.float32)

    # Panel 1: spatial tiles. Shade by how many tiles cover a cell, then outline each tile in its colour.
    y0, x0 = _MARGIN, _MARGIN
    cover = torch.zeros(n_h, n_w)
    for hi in h_iv:
        for wi in w_iv:
            cover[hi.slice, wi.slice] += 1
    grey = (0.92 - 0.17 * (cover - 1)).clamp(min=0.35)
    _blit(img, y0, x0, grey.unsqueeze(-1).expand(n_h, n_w, 3), s)
    line = 2 if s >= 4 else 1
    for a, hi in enumerate(h_iv):
        for b, wi in enumerate(w_iv):
            index = a * len(w_iv) + b
            colour = tile_colour(index)
            top, left = y0 + hi.start * s, x0 + wi.start * s
            _outline(img, top, left, hi.length * s, wi.length * s, line, colour)
            scale = 3 if min(hi.length, wi.length) * s >= 60 else 2 if min(hi.length, wi.length) * s >= 24 else 1
            label = str(index)
            ly, lx = top + line, left + line
            img[ly: ly + 7 * scale, lx: lx + (4 * len(label) + 2) * scale] = _BACKGROUND
            _text(img, label, ly + scale, lx + scale, colour, scale)

    # Panel 2: the weight sum, worst cell over frames (the sign of the larger deviation is kept).
    x1 = 2 * _MARGIN + panel_w
    worst_hw = _worst(deviation, dims=(0,))
    _blit(img, y0, x1, heat_colours(worst_hw), s)

    # Strip: one row per time tile showing its 1-D window as a profile, then the heat over frames.
    ys = 2 * _MARGIN + panel_h
    edges = [f * strip_w // n_f for f in range(n_f + 1)]
    for j, fi in enumerate(f_iv):
        top = ys + j * (_BAR_PX + 2)
        profile = _window_profile(fi, n_f)
        colour = tile_colour(j, palette_offset=7)
        for f in range(n_f):
            h = int(round(float(profile[f]) * _BAR_PX))
            if h > 0 and edges[f + 1] > edges[f]:
                img[top + _BAR_PX - h: top + _BAR_PX, x0 + edges[f]: x0 + edges[f + 1]] = torch.tensor(colour)
    top = ys + len(f_iv) * (_BAR_PX + 2)
    heat_f = heat_colours(_worst(deviation, dims=(1, 2)))
    for f in range(n_f):
        img[top: top + _BAR_PX, x0 + edges[f]: x0 + edges[f + 1]] = heat_f[f]

    return TilePreview(image=img.clamp(0, 1), weight_sum=weight_sum, plan=plan,
                       summary=describe(plan, weight_sum, positions))


def heat_colours(deviation: torch.Tensor) -> torch.Tensor:
    """Colours (..., 3) of weight-sum deviations from one: `EXACT_COLOUR` within `EXACT_TOLERANCE`,
    yellow to red above one, cyan to blue below (saturating at a deviation of 0.5)."""
    k = (deviation.abs() / 0.5).clamp(0, 1).sqrt().unsqueeze(-1)
    above = _lerp((1.0, 0.85, 0.15), (0.85, 0.05, 0.05), k)
    below = _lerp((0.35, 0.85, 0.95), (0.10, 0.15, 0.75), k)
    out = torch.where((deviation > 0).unsqueeze(-1), above, below)
    exact = (deviation.abs() <= EXACT_TOLERANCE).unsqueeze(-1)
    return torch.where(exact, torch.tensor(EXACT_COLOUR), out)


def tile_colour(index: int, palette_offset: int = 0) -> tuple[float, float, float]:
    """A distinct, bright colour per tile index (hues spaced by the golden angle)."""
    hue = ((index + palette_offset) * 0.6180339887) % 1.0
    return _hsv_to_rgb(hue, 0.8, 0.95)


def _hsv_to_rgb(h: float, s: float, v: float) -> tuple[float, float, float]:
    sector = int(h * 6.0) % 6
    f = h * 6.0 - int(h * 6.0)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    return [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][sector]


def describe(plan: TilePlan, weight_sum: torch.Tensor, positions: PositionRange | None = None) -> str:
    """A few lines a user can read: grid and tile sizes in latent cells and LTX pixels, the blend check, and the
    largest tile against the model's trained position range (`positions`, read from the model)."""
    n_f, n_h, n_w = plan.shape
    counts = plan.counts
    big = largest_tile(plan)
    overlaps = tuple(axis[0].ramp_out if len(axis) > 1 else 0 for axis in plan.axis_intervals)
    dev = float((weight_sum - 1.0).abs().max())
    lines = [
        f"latent {n_f} x {n_h} x {n_w} (frames x height x width) = {_px(plan.shape)}",
        f"{len(plan)} tiles: " + " x ".join(f"{name} {c} (overlap {o})" for name, c, o in zip(VIDEO_AXES, counts, overlaps)),
        f"largest tile: {big[0]} x {big[1]} x {big[2]} latent = {_px(big)}",
        ("blend weights sum to exactly 1 everywhere" if dev <= EXACT_TOLERANCE else "blend weights do NOT sum to 1")
        + f" (largest deviation {dev:.2e})",
    ]
    if positions is None:
        lines.append("connect the model to check the tiles against its trained position range")
    elif outside := positions.check(plan):
        lines.append(f"note: the largest tile is {outside}; use more tiles")
    return "\n".join(lines)


def _px(cells: Sequence[int]) -> str:
    f, h, w = LTX_GEOMETRY.pixel_shape(cells)
    return f"{f} frames at {w} x {h} px"


def _window_profile(interval: Interval, length: int) -> torch.Tensor:
    out = torch.zeros(length)
    out[interval.slice] = window_1d(interval)
    return out


def _worst(deviation: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    hi = deviation.amax(dim=dims)
    lo = deviation.amin(dim=dims)
    return torch.where(hi.abs() >= lo.abs(), hi, lo)


def _lerp(a: Sequence[float], b: Sequence[float], k: torch.Tensor) -> torch.Tensor:
    ta, tb = torch.tensor(a), torch.tensor(b)
    return ta + (tb - ta) * k


def _blit(img: torch.Tensor, top: int, left: int, cells: torch.Tensor, s: int) -> None:
    """Draw a (h, w, 3) grid of cells as s x s squares with its top-left corner at (top, left)."""
    block = cells.repeat_interleave(s, dim=0).repeat_interleave(s, dim=1)
    img[top: top + block.shape[0], left: left + block.shape[1]] = block


def _outline(img: torch.Tensor, top: int, left: int, h: int, w: int, line: int, colour: Sequence[float]) -> None:
    c = torch.tensor(colour, dtype=img.dtype)
    line = max(1, min(line, h // 2, w // 2))
    img[top: top + line, left: left + w] = c
    img[top + h - line: top + h, left: left + w] = c
    img[top: top + h, left: left + line] = c
    img[top: top + h, left + w - line: left + w] = c


def _text(img: torch.Tensor, text: str, top: int, left: int, colour: Sequence[float], scale: int = 1) -> None:
    """Digits in a 3 x 5 bitmap font, clipped to the image."""
    c = torch.tensor(colour, dtype=img.dtype)
    for k, ch in enumerate(text):
        bits = _DIGITS.get(ch)
        if bits is None:
            continue
        for r in range(5):
            for q in range(3):
                if bits[r * 3 + q] == "1":
                    y, x = top + r * scale, left + (k * 4 + q) * scale
                    if y < img.shape[0] and x < img.shape[1]:
                        img[y: y + scale, x: x + scale] = c
