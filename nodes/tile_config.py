"""Tile count config nodes: explicit counts per axis, or balanced over N GPUs."""

from __future__ import annotations

import logging

from comfy_api.latest import io

from ..ltx.model.patch import position_range
from ..tiling import VIDEO_AXES, AxisTiling, TileCountConfig, TilingError, balanced_split, plan_tiles, video_grid_shape
from ..tiling.position_range import largest_tile

log = logging.getLogger(__name__)
from .types import CATEGORY, TILING

_OVERLAP_TIP = (
    "Overlap between neighbouring tiles along {axis}, in latent cells ({unit}). Tiles are blended with "
    "trapezoid windows over this overlap. It is checked against the actual latent when sampling starts: "
    "an interior tile must be at least twice the overlap, and the error names the largest overlap that works."
)


class TileCountConfigNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPTileConfig",
            display_name="LTX TDP Tile Config",
            category=CATEGORY,
            description="How many overlapping latent tiles to cut along frames, height and width for tiled "
            "denoising and tiled VAE decode. The defaults are a 2 x 2 spatial split for a 4K upscale.",
            inputs=[
                io.Int.Input("frames_tiles", default=1, min=1, max=64,
                             tooltip="How many tiles along time (latent frames). 1 keeps the whole clip in every tile."),
                io.Int.Input("frames_overlap", default=0, min=0, max=64,
                             tooltip=_OVERLAP_TIP.format(axis="time", unit="1 latent frame = 8 video frames")),
                io.Int.Input("height_tiles", default=2, min=1, max=64, tooltip="How many tiles along the height."),
                io.Int.Input("height_overlap", default=5, min=0, max=256,
                             tooltip=_OVERLAP_TIP.format(axis="the height", unit="1 latent cell = 32 pixels")),
                io.Int.Input("width_tiles", default=2, min=1, max=64, tooltip="How many tiles along the width."),
                io.Int.Input("width_overlap", default=5, min=0, max=256,
                             tooltip=_OVERLAP_TIP.format(axis="the width", unit="1 latent cell = 32 pixels")),
            ],
            outputs=[TILING.Output(display_name="tiling", tooltip="Tile counts and overlaps per latent axis.")],
        )

    @classmethod
    def execute(cls, frames_tiles: int, frames_overlap: int, height_tiles: int, height_overlap: int,
                width_tiles: int, width_overlap: int) -> io.NodeOutput:
        return io.NodeOutput(TileCountConfig(
            frames=AxisTiling(frames_tiles, frames_overlap),
            height=AxisTiling(height_tiles, height_overlap),
            width=AxisTiling(width_tiles, width_overlap),
        ))


class BalancedTileConfigNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPBalancedTileConfig",
            display_name="LTX TDP Tile Config (balanced for N GPUs)",
            category=CATEGORY,
            description="One spatial tile per GPU: splits N into height x width tiles. With a latent "
            "connected, the split follows its aspect ratio (a landscape video gets more width tiles).",
            inputs=[
                io.Int.Input("gpus", default=2, min=1, max=64,
                             tooltip="Number of GPUs (ranks). The tile count equals this number."),
                io.Int.Input("overlap", default=5, min=0, max=256,
                             tooltip="Overlap between neighbouring tiles on height and width, in latent cells "
                             "(1 cell = 32 pixels). Upstream LTX-2 uses 5."),
                io.Latent.Input("latent", optional=True,
                                tooltip="Optional: the latent to be tiled, so the split follows its aspect ratio."),
                io.Model.Input("model", optional=True,
                               tooltip="Optional: the LTX model the tiles are for. With a latent too, a split whose "
                               "tiles leave the position range this model was trained on (read from the model) "
                               "logs a warning saying so."),
            ],
            outputs=[TILING.Output(display_name="tiling", tooltip="Tile counts and overlaps per latent axis.")],
        )

    @classmethod
    def execute(cls, gpus: int, overlap: int, latent: dict | None = None, model=None) -> io.NodeOutput:
        height = width = None
        if latent is not None:
            shape = video_grid_shape(latent["samples"])
            _, height, width = shape
        h, w = balanced_split(gpus, height, width)
        config = TileCountConfig(height=AxisTiling(h, overlap if h > 1 else 0),
                                 width=AxisTiling(w, overlap if w > 1 else 0))
        positions = position_range(model) if model is not None else None
        if positions is not None and latent is not None:
            try:
                big = largest_tile(plan_tiles(shape, config.axes, VIDEO_AXES).axis_intervals)
            except TilingError:  # the patcher refuses this layout with its own message when sampling starts
                big = (1, 1, 1)
            excess = positions.excess((1, big[1], big[2]))
            if excess:
                log.warning("LTX TDP: %d GPUs split this latent %d x %d; each tile is outside the model's trained "
                            "position range (%s). Use more GPUs, or LTX TDP Tile Config with more tiles.",
                            gpus, h, w, ", ".join(excess))
        return io.NodeOutput(config)
