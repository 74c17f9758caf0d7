"""LTX's latent geometry: how latent cells map to pixels on each axis of a video latent.

One type serves every place that converts between the latent grid and pixels: the model's per-tile
positions and guide bounds, the tiled VAE decode's plan, the decoders' reach and the tile preview.

A video latent has the axes (frames, height, width) (`VIDEO_AXES`). Space maps by a plain factor (LTX:
32 pixels a cell). Time maps causally in LTX's VAEs (the first latent frame is one pixel frame, every
later one is 8) and, in its transformers with `causal_temporal_positioning`, in the model's positions too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import TilingError
from .intervals import Interval

VIDEO_AXES: tuple[str, str, str] = ("frames", "height", "width")
"""The axes of a video latent grid, in the order of its trailing dimensions."""


@dataclass(frozen=True)
class AxisScale:
    """How one latent axis maps to pixels: `factor` pixels a cell; on a causal axis the first cell is one pixel."""

    factor: int
    causal: bool = False

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"a latent-to-pixel factor must be at least 1, got {self.factor}")

    def pixel_length(self, cells: int) -> int:
        """Pixels that `cells` latent cells decode to: factor*cells, or factor*(cells-1)+1 when causal (0 for 0)."""
        if cells <= 0:
            return 0
        return self.factor * (cells - 1) + 1 if self.causal else self.factor * cells

    def cell_length(self, pixels: int) -> int:
        """Latent cells that decode to exactly `pixels` pixels; raises TilingError when no count does."""
        if pixels < 1:
            raise TilingError(f"{pixels} pixels cannot come from any number of latent cells")
        cells = (pixels - 1) // self.factor + 1 if self.causal else pixels // self.factor
        if self.pixel_length(cells) != pixels:
            raise TilingError(f"{pixels} pixels cannot come from a whole number of latent cells (factor {self.factor})")
        return cells

    def owned_pixels(self, start: int, end: int) -> Interval:
        """The pixels that latent cells [start, end) own in the full decode (and where the model puts them).

        Owned spans of a partition of the latent axis partition the pixel axis: cell 0 of a causal axis owns
        pixel 0, cell j >= 1 owns [factor*j - factor + 1, factor*j + 1).
        """
        if not 0 <= start < end:
            raise ValueError(f"not a latent interval: [{start}, {end})")
        if self.causal:
            return Interval(max(0, self.factor * (start - 1) + 1), self.factor * (end - 1) + 1)
        return Interval(self.factor * start, self.factor * end)


@dataclass(frozen=True)
class LatentGeometry:
    """The scale of each axis of a (frames, height, width) latent grid."""

    frames: AxisScale
    height: AxisScale
    width: AxisScale

    @classmethod
    def of_factors(cls, factors: Sequence[int], causal_time: bool) -> "LatentGeometry":
        """From (time, height, width) factors, as LTX models keep them in `vae_scale_factors`."""
        t, h, w = (int(f) for f in factors)
        return cls(AxisScale(t, causal_time), AxisScale(h), AxisScale(w))

    @property
    def axes(self) -> tuple[AxisScale, AxisScale, AxisScale]:
        return (self.frames, self.height, self.width)

    @property
    def factors(self) -> tuple[int, int, int]:
        return tuple(a.factor for a in self.axes)

    def pixel_bounds(self, start: int, end: int, axis: int) -> tuple[float, float]:
        """Pixel [start, end) of latent cells [start, end) on `axis`: what the model's position map gives them."""
        owned = self.axes[axis].owned_pixels(start, end)
        return float(owned.start), float(owned.end)

    def pixel_shape(self, latent_shape: Sequence[int]) -> tuple[int, int, int]:
        """(frames, height, width) in pixels of a latent grid of this shape."""
        return tuple(a.pixel_length(int(n)) for a, n in zip(self.axes, latent_shape))

    def latent_shape(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        """The latent grid of a video of this size, as LTX's empty-latent nodes and VAE encoders make it:
        whole cells, extra pixels dropped (frames (n - 1) // 8 + 1 on a causal time axis)."""
        if frames < 1 or height < self.height.factor or width < self.width.factor:
            raise ValueError(f"a video of {frames} frames at {width} x {height} px has no latent (at least 1 frame, "
                             f"{self.width.factor} x {self.height.factor} px)")
        f = self.frames
        cells = (frames - 1) // f.factor + 1 if f.causal else frames // f.factor
        return (cells, height // self.height.factor, width // self.width.factor)


LTX_GEOMETRY = LatentGeometry(AxisScale(8, causal=True), AxisScale(32), AxisScale(32))
"""LTX's video VAEs (LTX-Video, LTX-2, LTX-2.5): frames x8 with a causal first frame, height and width x32."""


def video_part(samples: object) -> object:
    """The video part of a LATENT's samples: the object itself, or the first of an LTX-2 audio + video nested
    tensor (duck-typed: `is_nested` and `.tensors`, ComfyUI's NestedTensor)."""
    if getattr(samples, "is_nested", False) and isinstance(getattr(samples, "tensors", None), (list, tuple)):
        return samples.tensors[0]
    return samples


def video_grid_shape(samples: object) -> tuple[int, int, int]:
    """(frames, height, width) of a LATENT's video (see `video_part`); ValueError unless it is 5-D."""
    shape = tuple(getattr(video_part(samples), "shape", ()))
    if len(shape) != 5:
        raise ValueError(f"expected a video latent (batch, channels, frames, height, width); got shape {shape}")
    return (int(shape[2]), int(shape[3]), int(shape[4]))
