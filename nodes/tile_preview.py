"""The tile layout preview node: a tile config on a latent (or a video size) -> a picture of the tiles."""

from __future__ import annotations

from comfy_api.latest import io, ui

from ..tiling import LTX_GEOMETRY, video_grid_shape
from ..ltx.model.facts import position_range
from ..tiling.preview import preview_tiles
from .types import CATEGORY, TILING


class TilePreviewNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPTilePreview",
            display_name="LTX TDP Tile Preview",
            category=CATEGORY,
            description="Shows how a tile config cuts a latent before any GPU time is spent: tile outlines "
            "(numbered in the order ranks take them), overlaps shaded darker, each time tile's blend window, "
            "and a heat map of the blend-weight sum, one flat green where the blend is exact. A layout the "
            "TDP patcher would refuse fails here with the same message.",
            inputs=[
                TILING.Input("tiling", tooltip="The tile config to preview (LTX TDP Tile Config, or its balanced or tile "
                             "size variant: the summary then shows the counts and overlaps it resolves to)."),
                io.Int.Input("width", default=3840, min=32, max=16384, step=32,
                             tooltip="Video width in pixels, used when no latent is connected "
                             "(width // 32 latent cells, as EmptyLTXVLatentVideo makes it)."),
                io.Int.Input("height", default=2176, min=32, max=16384, step=32,
                             tooltip="Video height in pixels, used when no latent is connected "
                             "(height // 32 latent cells)."),
                io.Int.Input("frames", default=121, min=1, max=4097, step=8,
                             tooltip="Video length in frames, used when no latent is connected "
                             "((frames - 1) // 8 + 1 latent frames)."),
                io.Latent.Input("latent", optional=True,
                                tooltip="Optional: the latent the tiles are for (e.g. the upscaled latent going "
                                "into the TDP stage). When connected, width, height and frames are ignored."),
                io.Model.Input("model", optional=True,
                               tooltip="Optional: the LTX model the tiles are for. The summary then checks the "
                               "largest tile against the position range this model was trained on (read from "
                               "the model: its positional_embedding_max_pos)."),
            ],
            outputs=[
                io.Image.Output(display_name="preview", tooltip="The tile layout picture."),
                io.String.Output(display_name="summary",
                                 tooltip="Grid and tile sizes in latent cells and pixels, and whether the blend "
                                 "weights sum to exactly one."),
            ],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, tiling, width: int = 3840, height: int = 2176, frames: int = 121,
                latent: dict | None = None, model=None) -> io.NodeOutput:
        if latent is not None:
            shape = video_grid_shape(latent["samples"])
        else:
            shape = LTX_GEOMETRY.latent_shape(frames, height, width)
        positions = position_range(model) if model is not None else None
        preview = preview_tiles(shape, tiling, positions=positions)
        image = preview.image.unsqueeze(0)
        return io.NodeOutput(image, preview.summary, ui=ui.PreviewImage(image, cls=cls))
