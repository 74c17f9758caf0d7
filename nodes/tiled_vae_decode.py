"""Tiled VAE decode node: an LTX video latent -> IMAGE, tile by tile into one CPU buffer."""

from __future__ import annotations

from comfy_api.latest import io

from ..ltx.progress import progress_bar
from ..ltx.vae import DecodeSettings, decode_tiled, image_batch
from ..ltx.vae.devices import DEVICE_CHOICES, decode_devices
from ..ltx.vae.settings import QUALITY_PRESETS
from .types import CATEGORY, TDP_GROUP

DEFAULTS = DecodeSettings()
QUALITY_TOOLTIP = ("How much context each tile decodes, and so how close it comes to the untiled decode. "
                   + " ".join(f"{p.name}: {p.description}." for p in QUALITY_PRESETS)
                   + " The dB are PSNR against the untiled decode, measured on LTX-2's decoder with random "
                   "weights at 640 px with one tile border (a trained decoder reaches less far in effect). Lower "
                   "qualities are faster when there are several tiles. LTX-2.5's diffusion decoder: the preset sets "
                   "only its last (diffusion) stage's context, which reaches 5 cells, so high and balanced are "
                   "exact too; fast measured 137 dB, custom 2 / 1 / 0 104 / 71 / 46 dB (published configuration, random "
                   "weights, 768 x 64 x 9 in 256 px tiles; ComfyUI's VAE Decode (Tiled) at the LTX-2.5 templates' "
                   "settings: 10.6 dB).")


class TiledVAEDecodeNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPTiledVAEDecode",
            display_name="LTX TDP Tiled VAE Decode",
            category=CATEGORY,
            description="Decodes an LTX-Video or LTX-2 video latent in tiles, straight into one output buffer "
            "in system memory. Each tile also decodes the latent cells around it that the decoder reaches and "
            "crops them away, so at the default 'exact' quality the frames equal an untiled decode (up to float "
            "rounding). LTX-2.5's diffusion video decoder is recognised by itself and decoded exactly too (its "
            "tiles slice the one noise field the untiled decode draws; tiles of at most 512 px and 128 frames). "
            "LTX-2 audio+video latents: the video part is decoded. With device 'all', the tiles are shared between "
            "this machine's GPUs; with a TDP group, between its GPUs.",
            inputs=[
                io.Vae.Input("vae", tooltip="The LTX video VAE (LTX-Video, LTX-2 or LTX-2.5) that belongs to the model."),
                io.Latent.Input("samples", tooltip="The video latent to decode (an LTX-2 audio+video latent "
                                "decodes its video part)."),
                io.Int.Input("spatial_tile", default=DEFAULTS.spatial_tile, min=64, max=8192, step=32,
                             tooltip="Largest tile width and height, in pixels (whole latent cells of 32 px). "
                             "Fewer, larger tiles cost less: each tile also decodes its context. 2048 splits "
                             "3840x2176 into 2 x 2 tiles; set it above the frame size to decode whole frames on "
                             "one GPU (ComfyUI >= 0.8 streams the frames through the GPU, so large tiles fit). "
                             "The node logs its GPU memory estimate before decoding (docs/vae-decode.md: 24 and 12 GB settings)."),
                io.Int.Input("spatial_overlap", default=DEFAULTS.spatial_overlap, min=0, max=4096, step=32,
                             tooltip="Pixels that neighbouring tiles share and blend over (rounded up to whole "
                             "32 px cells). Must be less than half the tile. Not needed with the 'exact' quality "
                             "(the crops already match); with a lower quality, 32-64 px softens the seam."),
                io.Int.Input("temporal_tile", default=DEFAULTS.temporal_tile, min=8, max=4096, step=8,
                             tooltip="Largest number of frames decoded at once (whole latent frames of 8 frames). "
                             "The default decodes whole clips at once: exact in time at no extra cost, and "
                             "ComfyUI >= 0.8 streams the frames through the GPU itself. On older ComfyUI, lower "
                             "it (e.g. 80) to bound memory; each chunk then also decodes its temporal context."),
                io.Int.Input("temporal_overlap", default=DEFAULTS.temporal_overlap, min=0, max=4096, step=8,
                             tooltip="Frames that neighbouring chunks share and cross-fade over (rounded up to "
                             "whole latent frames of 8). Must be less than half the temporal tile."),
                io.Int.Input("context_cells", default=DEFAULTS.context_cells, min=0, max=32, optional=True,
                             tooltip="Used when quality is 'custom': extra latent cells (32 px, or 8 frames in "
                             "time) every tile decodes around itself and then crops away. The LTX-2 decoder "
                             "reaches 16 cells in space and 14 latent frames in time; at that context a tile "
                             "equals the untiled decode. LTX-2.5's diffusion decoder: the context of its last stage "
                             "(exact from 5)."),
                TDP_GROUP.Input("tdp_group", optional=True,
                                tooltip="Optional: a multi-GPU group from the LTX TDP launcher. The tiles go "
                                "round-robin to its GPUs (the VAE is sent to them the first time); each worker sends "
                                "its tiles' pixels here, so only this machine holds the clip's frames. The same "
                                "result as decoding here alone."),
                io.Combo.Input("quality", options=[p.name for p in QUALITY_PRESETS], default=DEFAULTS.quality,
                               optional=True, tooltip=QUALITY_TOOLTIP),
                io.Combo.Input("device", options=list(DEVICE_CHOICES), default="default", optional=True,
                               tooltip="Which GPUs of this machine decode the tiles. default: the VAE's own GPU, as "
                               "ComfyUI decodes. all: that GPU and every other GPU ComfyUI sees (each gets a copy of "
                               "the VAE, loaded by ComfyUI, and an equal share of the tiles); the same frames bit for "
                               "bit, each GPU needing what the logged estimate says for one tile. Use more tiles "
                               "than GPUs (a smaller spatial_tile) so every GPU has work."),
            ],
            outputs=[io.Image.Output(tooltip="The decoded frames, every batch's frames one after another.")],
        )

    @classmethod
    def execute(cls, vae, samples: dict, spatial_tile: int = DEFAULTS.spatial_tile,
                spatial_overlap: int = DEFAULTS.spatial_overlap, temporal_tile: int = DEFAULTS.temporal_tile,
                temporal_overlap: int = DEFAULTS.temporal_overlap, context_cells: int = DEFAULTS.context_cells,
                tdp_group=None, quality: str = DEFAULTS.quality, device: str = "default") -> io.NodeOutput:
        settings = DecodeSettings(spatial_tile, spatial_overlap, temporal_tile, temporal_overlap, quality, context_cells)
        frames = decode_tiled(vae, samples["samples"], settings, group=tdp_group, progress=progress_bar(),
                              devices=decode_devices(vae, device))
        return io.NodeOutput(image_batch(frames))
