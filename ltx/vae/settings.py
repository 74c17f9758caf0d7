"""A tiled decode's settings (`DecodeSettings`, the node's defaults, checked once) and its quality presets."""

from __future__ import annotations

from dataclasses import dataclass

from ...tiling import AxisTileSize
from ..errors import VaeDecodeError


@dataclass(frozen=True)
class QualityPreset:
    """A named context for the tiled decode: `context` latent cells in space and time, None for the reach,
    -1 for the settings' own `context_cells`."""

    name: str
    context: int | None
    description: str


QUALITY_PRESETS: tuple[QualityPreset, ...] = (
    QualityPreset("exact", None, "context = the decoder's reach, read from its layers (LTX-2: 16 cells in space, "
                  "14 latent frames in time): tiles equal the untiled decode up to float rounding"),
    QualityPreset("high", 8, "8 cells of context: 85 dB"),
    QualityPreset("balanced", 6, "6 cells of context: 62 dB"),
    QualityPreset("fast", 4, "4 cells of context: 45 dB"),
    QualityPreset("custom", -1, "context_cells cells of context in space and time"),
)
"""The node's quality choices, best first. Their dB: PSNR against the untiled decode of the real-configuration
LTX-2 decoder with random weights, 640 x 128 px with one tile border across it (bench/bench_vae_decode.py)."""

PRESETS = {p.name: p for p in QUALITY_PRESETS}

DIFFUSION_TILE_CAP = (128, 512)
"""(time, space), in frames and pixels: the largest tile LTX-2.5's diffusion decoder decodes at once; larger tile
settings are lowered to it (at the `exact` quality the tile size changes no pixel). Chosen so that the node's defaults
fit a 24 GB card at 3840 x 2176 x 121 by the pack's accounting (`TiledDecode.memory`): stage 5 keeps about seven
tensors of 256 channels per position of a tile plus its 40 positions of reach on every side, 18.0 GiB on the GPU
with the VAE's weights for the largest of the 5 x 8 tiles (1024 px tiles: 36.3 GiB, for 36 % fewer stage-5
positions; docs/vae-decode.md has the other sizes)."""


@dataclass(frozen=True)
class DecodeSettings:
    """Everything that fixes a tiled decode's result, with the node's defaults.

    Tiles and overlaps are in pixels (space) and frames (time), rounded to whole latent cells when planned;
    `quality` picks the context each tile decodes around itself (`context_cells` latent cells with "custom");
    `seed` draws the decode noise of timestep-conditioned VAEs. Checked when made: VaeDecodeError names a
    setting out of range or an unknown quality.
    """

    spatial_tile: int = 2048
    spatial_overlap: int = 0
    temporal_tile: int = 4096
    temporal_overlap: int = 0
    quality: str = "exact"
    context_cells: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.quality not in PRESETS:
            raise VaeDecodeError(f"unknown decode quality {self.quality!r}; expected one of {', '.join(PRESETS)}")
        for name in ("spatial_tile", "temporal_tile"):
            if int(getattr(self, name)) < 1:
                raise VaeDecodeError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("spatial_overlap", "temporal_overlap", "context_cells"):
            if int(getattr(self, name)) < 0:
                raise VaeDecodeError(f"{name} cannot be negative, got {getattr(self, name)}")

    def tile_sizes(self, cap: tuple[int, int] | None = None) -> tuple[AxisTileSize, AxisTileSize, AxisTileSize]:
        """(frames, height, width) tile sizes and overlaps, in frames and pixels; with `cap` (time, space: frames,
        pixels) no tile is larger than it (an overlap too large for the capped tile is lowered to less than half)."""
        frames, pixels = int(self.temporal_tile), int(self.spatial_tile)
        t_overlap, s_overlap = int(self.temporal_overlap), int(self.spatial_overlap)
        if cap is not None:
            frames, pixels = min(frames, cap[0]), min(pixels, cap[1])
            t_overlap, s_overlap = min(t_overlap, (frames - 1) // 2), min(s_overlap, (pixels - 1) // 2)
        space = AxisTileSize(pixels, s_overlap)
        return (AxisTileSize(frames, t_overlap), space, space)

    def context(self, reach: tuple[int, int]) -> tuple[int, int]:
        """(time, space) context in latent cells for a decoder whose (time, space) reach is `reach`.

        "exact" is the reach; a fixed preset never exceeds the reach on an axis (more context changes nothing);
        "custom" is `context_cells` on both axes.
        """
        preset = PRESETS[self.quality]
        if preset.context == -1:
            return int(self.context_cells), int(self.context_cells)
        if preset.context is None:
            return reach
        return min(preset.context, reach[0]), min(preset.context, reach[1])
