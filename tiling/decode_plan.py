"""The tile plan of a tiled VAE decode.

A video VAE turns latent cells into pixels along each axis as its `tiling.geometry.LatentGeometry` says:
space by a plain factor (LTX: 32 pixels a cell), time causally (LTX: the first latent frame is one pixel
frame, every later one is 8). A tiled decode cuts its tiles on the latent grid and maps them to the pixels their cells own, ramps scaled by
the factor, so that the one window and blend implementation (`tiling.blend.blend_tiles`) blends pixels
unchanged. Each pixel tile is decoded from the latent cells it needs plus a context margin (clamped at
the borders), and the decoded block is cropped back to the tile.

Decoding latent cells [c, d) on its own yields the pixels [factor*c, factor*c + n) of the untiled decode
on every axis, n = `AxisScale.pixel_length(d - c)`; on a causal axis the chunk's first latent frame gives
a single pixel frame (the last of the eight it owns in the full decode), so a chunk is always decoded
from at least one latent frame before its first pixel frame and the frames before that are cropped off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .config import AxisTileSize
from .errors import TilingError
from .geometry import LTX_GEOMETRY, VIDEO_AXES, AxisScale, LatentGeometry
from .intervals import Interval
from .plan import Tile, TilePlan, plan_tiles


def cells_to_decode(scale: AxisScale, start: int, end: int, cells: int, context: int = 0) -> Interval:
    """Latent cells to decode for pixels [start, end) of an axis of `cells` cells: the cells that own
    those pixels plus `context` cells at each side, clamped to the axis.

    Invariant: decoding the result [c, d) alone yields pixels [factor*c, factor*c + pixel_length(d-c)),
    which contain [start, end). On a causal axis c <= floor(start/factor) whatever the context: a chunk
    decoded from cell c starts with a one-frame head (frame factor*c), which must not lie after `start`,
    so a chunk starting inside the clip always decodes at least the cell before its first owned one.
    """
    if not 0 <= start < end:
        raise ValueError(f"not a pixel interval: [{start}, {end})")
    if context < 0:
        raise ValueError(f"context cannot be negative, got {context}")
    if scale.causal:
        first, last = -(-start // scale.factor), -(-(end - 1) // scale.factor)  # cells owning start, end-1
        low = min(start // scale.factor, first - context)
    else:
        first, last = start // scale.factor, (end - 1) // scale.factor
        low = first - context
    return Interval(max(0, low), min(cells, last + 1 + context))


@dataclass(frozen=True)
class DecodeSource:
    """What one pixel tile decodes and where its pixels sit in the decoded block.

    `latent` slices the latent grid (context included); `crop` slices the decoded block down to exactly
    `tile`'s pixels; `decoded_shape` is the block's pixel shape.
    """

    tile: Tile
    latent: tuple[slice, ...]
    crop: tuple[slice, ...]
    decoded_shape: tuple[int, ...]

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.latent)


@dataclass(frozen=True)
class DecodePlan:
    """A tiled decode: tiles on the latent grid, the same tiles on the pixel grid, and the source of each.

    `latent` and `pixels` enumerate the same tiles in the same order (tile i of one is tile i of the other).
    """

    latent_shape: tuple[int, ...]
    scales: tuple[AxisScale, ...]
    context: tuple[int, ...]
    latent: TilePlan
    pixels: TilePlan

    @property
    def pixel_shape(self) -> tuple[int, ...]:
        return self.pixels.shape

    def source(self, tile: Tile) -> DecodeSource:
        """Latent slices (with context) to decode for pixel tile `tile`, and the crop that leaves exactly its pixels."""
        latent, crop, decoded = [], [], []
        for interval, scale, cells, ctx in zip(tile.intervals, self.scales, self.latent_shape, self.context):
            src = cells_to_decode(scale, interval.start, interval.end, cells, ctx)
            offset = interval.start - scale.factor * src.start
            latent.append(src.slice)
            crop.append(slice(offset, offset + interval.length))
            decoded.append(scale.pixel_length(src.length))
        return DecodeSource(tile, tuple(latent), tuple(crop), tuple(decoded))

    def largest_source(self) -> tuple[int, ...]:
        """Largest latent block any tile decodes, per axis (for memory estimates)."""
        shapes = [self.source(t).latent_shape for t in self.pixels.tiles]
        return tuple(max(s[i] for s in shapes) for i in range(len(self.latent_shape)))


def pixel_tiles(latent: TilePlan, scales: Sequence[AxisScale]) -> TilePlan:
    """The same tiles on the pixel grid: each latent interval becomes the pixels its cells own
    (`AxisScale.owned_pixels`) and each ramp of r cells a ramp of r * factor pixels.

    Invariant: neighbours that overlap by r cells overlap by exactly r * factor pixels, on a causal axis
    too (a chunk starting at latent frame a > 0 owns frames from factor*a - factor + 1), so when the
    latent plan's windows sum to one so do the pixel plan's.
    """
    axes = []
    for intervals, scale in zip(latent.axis_intervals, scales):
        axes.append(tuple(
            Interval(owned.start, owned.end, i.ramp_in * scale.factor, i.ramp_out * scale.factor)
            for i, owned in ((i, scale.owned_pixels(i.start, i.end)) for i in intervals)
        ))
    shape = tuple(scale.pixel_length(n) for scale, n in zip(scales, latent.shape))
    return TilePlan(shape, tuple(axes))


def latent_tile_size(spec: AxisTileSize, scale: AxisScale, axis: str, unit: str = "pixels") -> AxisTileSize:
    """A tile size and overlap in pixels as whole latent cells: the tile rounded down (at least one cell),
    the overlap rounded up.

    Refuses (TilingError, in `unit`s) a tile not longer than twice its overlap, before or after rounding;
    every other setting splits any axis length (tests/tiling/test_decode_plan.py checks this).
    """
    size, overlap, f = spec.size, spec.overlap, scale.factor
    if size < 1:
        raise TilingError(f"{axis}: the tile size must be at least 1 {unit}, got {size}")
    if overlap < 0:
        raise TilingError(f"{axis}: the overlap cannot be negative, got {overlap} {unit}")
    if 2 * overlap >= size:
        raise TilingError(
            f"{axis}: a tile of {size} {unit} is too small for an overlap of {overlap} {unit}: a tile must be "
            f"longer than twice its overlap; use an overlap of at most {(size - 1) // 2} {unit} or a tile of "
            f"at least {2 * overlap + 1} {unit}"
        )
    cells, overlap_cells = max(1, size // f), -(-overlap // f)
    if 2 * overlap_cells >= cells:
        raise TilingError(
            f"{axis}: tiles are whole latent cells of {f} {unit}: a tile of {size} {unit} is {cells} cell(s) and "
            f"an overlap of {overlap} {unit} rounds up to {overlap_cells}, more than half the tile; use a tile "
            f"of at least {(2 * overlap_cells + 1) * f} {unit} or an overlap of at most {((cells - 1) // 2) * f} "
            f"{unit}"
        )
    return AxisTileSize(cells, overlap_cells)


def plan_decode(
    latent_shape: Sequence[int],
    tiles: Sequence[AxisTileSize],
    context: Sequence[int],
    geometry: LatentGeometry = LTX_GEOMETRY,
) -> DecodePlan:
    """Plan a tiled decode of a (frames, height, width) latent grid `latent_shape`.

    `tiles` are tile sizes and overlaps in pixels per axis (rounded to whole latent cells, see
    `latent_tile_size`), `context` the extra latent cells each tile decodes beyond what its pixels need.
    The tiles are cut on the latent grid and mapped to pixels (`pixel_tiles`), so no tile decodes a
    partial cell. Invariants: the pixel tiles' windows sum to exactly one over the pixel grid, and every
    source's crop holds exactly its tile's pixels. Raises TilingError in pixel units for a refused setting.
    """
    names, scales = VIDEO_AXES, geometry.axes
    if not (len(tiles) == len(context) == len(latent_shape) == len(names)):
        raise TilingError(
            f"expected {len(names)} axes {tuple(names)}, got a latent grid of shape {tuple(latent_shape)}"
        )
    for name, cells in zip(names, latent_shape):
        if int(cells) < 1:
            raise TilingError(f"{name}: the latent has no cells on this axis (shape {tuple(latent_shape)})")
    for name, ctx in zip(names, context):
        if int(ctx) < 0:
            raise TilingError(f"{name}: the context cannot be negative, got {ctx} latent cells")
    shape = tuple(int(c) for c in latent_shape)
    units = ("frames", "pixels", "pixels")
    specs = [latent_tile_size(spec, scale, name, unit) for spec, scale, name, unit in zip(tiles, scales, names, units)]
    latent = plan_tiles(shape, specs, names)
    return DecodePlan(shape, tuple(scales), tuple(int(c) for c in context), latent, pixel_tiles(latent, scales))
