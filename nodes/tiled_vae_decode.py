"""Tiled VAE decode node: an LTX video latent -> IMAGE, tile by tile into one CPU buffer."""

from __future__ import annotations

from comfy_api.latest import io

from ..ltx.vae_decode import DEFAULT_SPATIAL_CONTEXT, decode_tiled, image_batch
from .types import CATEGORY, TDP_GROUP


class TiledVAEDecodeNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPTiledVAEDecode",
            display_name="LTX TDP Tiled VAE Decode",
            category=CATEGORY,
            description="Decodes an LTX-Video or LTX-2 video latent in overlapping tiles of space and time, "
            "blended with windows that sum to exactly one, straight into one output buffer in system memory. "
            "Memory stays at one tile's decode plus the frames, so 4K clips fit a 24 GB card. LTX-2 "
            "audio+video latents: the video part is decoded. With a TDP group, the tiles are shared between "
            "its GPUs.",
            inputs=[
                io.Vae.Input("vae", tooltip="The LTX video VAE (LTX-Video or LTX-2) that belongs to the model."),
                io.Latent.Input("samples", tooltip="The video latent to decode (an LTX-2 audio+video latent "
                                "decodes its video part)."),
                io.Int.Input("spatial_tile", default=768, min=64, max=8192, step=32,
                             tooltip="Largest tile width and height, in pixels (whole latent cells of 32 px). "
                             "Smaller tiles use less memory; 768 fits 3840x2160 on a 24 GB card."),
                io.Int.Input("spatial_overlap", default=64, min=0, max=4096, step=32,
                             tooltip="Pixels that neighbouring tiles share and blend over (rounded up to whole "
                             "32 px cells). Must be less than half the tile."),
                io.Int.Input("temporal_tile", default=80, min=8, max=4096, step=8,
                             tooltip="Largest number of frames decoded at once (whole latent frames of 8 "
                             "frames). Fewer frames use less memory."),
                io.Int.Input("temporal_overlap", default=24, min=0, max=4096, step=8,
                             tooltip="Frames that neighbouring chunks share and cross-fade over (rounded up to "
                             "whole latent frames of 8). Must be less than half the temporal tile."),
                io.Int.Input("context_cells", default=DEFAULT_SPATIAL_CONTEXT, min=0, max=16, optional=True,
                             tooltip="Extra latent cells (32 px each) every tile decodes around itself and then "
                             "crops away, so the decoder sees past the tile's edge. More context comes closer to an "
                             "untiled decode and costs time; raise it if you see seams."),
                TDP_GROUP.Input("tdp_group", optional=True,
                                tooltip="Optional: a multi-GPU group from the LTX TDP launcher. The tiles go "
                                "round-robin to its GPUs (the VAE is sent to them the first time) and the frames "
                                "are summed on this machine: the same result as decoding here alone. Every rank "
                                "needs system memory for the whole clip's frames."),
            ],
            outputs=[io.Image.Output(tooltip="The decoded frames, every batch's frames one after another.")],
        )

    @classmethod
    def execute(cls, vae, samples: dict, spatial_tile: int = 768, spatial_overlap: int = 64,
                temporal_tile: int = 80, temporal_overlap: int = 24, context_cells: int = DEFAULT_SPATIAL_CONTEXT,
                tdp_group=None) -> io.NodeOutput:
        import comfy.utils

        bar = None

        def progress(done: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = comfy.utils.ProgressBar(total)
            bar.update_absolute(done, total)

        decode = tdp_group.decode if tdp_group is not None else decode_tiled
        frames = decode(vae, samples["samples"], spatial_tile=spatial_tile, spatial_overlap=spatial_overlap,
                        temporal_tile=temporal_tile, temporal_overlap=temporal_overlap,
                        spatial_context=context_cells, progress=progress)
        return io.NodeOutput(image_batch(frames))
