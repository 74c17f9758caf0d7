"""What bench/bench_patcher.py measures: the benchmark's model, the model call's inputs and the latent sizes."""

from __future__ import annotations

from dataclasses import dataclass

from ...tiling import AxisTiling, TileCountConfig

BENCH_MODEL = dict(num_layers=2, num_attention_heads=4, attention_head_dim=32, cross_attention_dim=128)
"""2 layers, 4 heads x 32 = 128 wide (the test model: 1 layer, 2 x 8 = 16). Text context stays 16 wide."""

CONTEXT_TOKENS, CONTEXT_DIM = 8, 16
SIGMA = 0.6
PX = (8, 32, 32)  # latent cell -> pixels (time, height, width); the first latent frame is one pixel frame


@dataclass(frozen=True)
class Case:
    frames: int
    height: int
    width: int
    tiles: tuple[int, int]
    overlap: int

    @property
    def latent(self) -> tuple[int, int, int]:
        return (self.frames, self.height, self.width)

    @property
    def tokens(self) -> int:
        return self.frames * self.height * self.width

    def pixels(self) -> str:
        return f"{self.width * PX[2]}x{self.height * PX[1]}x{(self.frames - 1) * PX[0] + 1}"

    def tiling(self) -> TileCountConfig:
        h, w = self.tiles
        return TileCountConfig(height=AxisTiling(h, self.overlap if h > 1 else 0),
                               width=AxisTiling(w, self.overlap if w > 1 else 0))


OVERHEAD_CASES = [
    Case(4, 16, 16, (2, 2), 4),   # 512 x 512 x 25 px
    Case(4, 32, 32, (2, 2), 5),   # 1024 x 1024 x 25 px
    Case(4, 32, 32, (3, 3), 4),
]
SCALING_SIZES = [8, 12, 16, 24, 32, 40, 48]
"""Latent height = width (x 32 px), 4 latent frames (25 px frames), 2 x 2 tiles with overlap 4 (2 at 8)."""
