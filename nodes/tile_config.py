"""Tile config nodes: explicit counts per axis, balanced over N GPUs, or a fixed tile size in pixels."""

from __future__ import annotations

import logging

from comfy_api.latest import io

from ..ltx.model.facts import position_range
from ..tiling import (VIDEO_AXES, AxisTiling, TileCountConfig, TileSizeConfig, TilingError, balanced_split, plan_tiles,
                      video_grid_shape)
from .types import CATEGORY, TILING

log = logging.getLogger(__name__)

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
                outside = positions.check(plan_tiles(shape, config.axes, VIDEO_AXES))
            except TilingError:  # the patcher refuses this layout with its own message when sampling starts
                outside = None
            if outside:
                log.warning("LTX TDP: %d GPUs split this latent %d x %d; each tile is %s. Use more GPUs, or LTX TDP "
                            "Tile Config with more tiles.", gpus, h, w, outside)
        return io.NodeOutput(config)


_SIZE_TIP = (
    "Largest tile {axis} in pixels. Tiles are whole latent cells of 32 px, so this rounds down to a multiple of 32. "
    "On the actual latent the axis gets the fewest tiles of at most this size, overlapping as much as keeps them "
    "within it (at least min_overlap): exactly what LTX TDP Tile Config gives for that tile count and overlap. "
    "IC-LoRAs are trained on fixed windows: set their window here. Tiles come out this size wherever the latent is "
    "larger, so a frame a little larger than one tile gets two tiles that overlap by almost a whole tile (3840 x 2176 "
    "in 2048 px tiles: 2 x 2 tiles of 2048 px, 1.8x the tokens of LTX TDP Tile Config's 2 x 2); for the least work "
    "per frame use that node's tile counts."
)


class TileSizeConfigNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPTileSizeConfig",
            display_name="LTX TDP Tile Config (tile size)",
            category=CATEGORY,
            description="Tiles of a fixed largest size in pixels instead of a tile count (like LTXV Tiled Fusion "
            "Sampler's tile size; IC-LoRAs are trained on fixed windows). Once the latent is known, each axis is "
            "the count split of LTX TDP Tile Config with the fewest tiles of at most this size and the largest "
            "overlap (at least the minimum) that keeps them within it. The tile preview shows the counts and "
            "overlaps it chose.",
            inputs=[
                io.Int.Input("tile_width", default=2048, min=32, max=16384, step=32,
                             tooltip=_SIZE_TIP.format(axis="width")),
                io.Int.Input("tile_height", default=2048, min=32, max=16384, step=32,
                             tooltip=_SIZE_TIP.format(axis="height")),
                io.Int.Input("min_overlap", default=5, min=0, max=256,
                             tooltip="Smallest overlap between neighbouring tiles on height and width, in latent "
                             "cells (1 cell = 32 pixels; upstream LTX-2 uses 5). The overlap used is the largest "
                             "that keeps tiles within the size, never less than this. A tile must be longer than "
                             "twice this overlap."),
                io.Int.Input("tile_frames", default=0, min=0, max=4096, step=8,
                             tooltip="Largest tile length in video frames (whole latent frames of 8 video frames, "
                             "rounded down). 0 (default): no tiles along time, every tile holds the whole clip."),
                io.Int.Input("min_frames_overlap", default=1, min=0, max=64,
                             tooltip="Smallest overlap between neighbouring time tiles, in latent frames (1 latent "
                             "frame = 8 video frames). Used only when tile_frames is not 0."),
            ],
            outputs=[TILING.Output(display_name="tiling", tooltip="Largest tile size and smallest overlap per "
                                   "latent axis; resolves to tile counts and overlaps on the actual latent.")],
        )

    @classmethod
    def execute(cls, tile_width: int, tile_height: int, min_overlap: int, tile_frames: int = 0,
                min_frames_overlap: int = 1) -> io.NodeOutput:
        return io.NodeOutput(TileSizeConfig.of_pixels(tile_width, tile_height, min_overlap, tile_frames,
                                                      min_frames_overlap))
