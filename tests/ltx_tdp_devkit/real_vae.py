"""The LTX video VAEs at their real configurations, built with ComfyUI's own VideoVAE, with random weights.

The weights do not matter for which latent cells a pixel depends on (the reach); they do for how far from
exact a smaller context is, which is why the dB figures of the decode's quality presets say "random
weights". Weights get PyTorch's default initialisation (ComfyUI's VAE classes skip it), so every layer
has the scale it would have before training.
"""

from __future__ import annotations

import json

import torch

LTX2_VAE_CONFIG = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3, "latent_channels": 128,
    "encoder_blocks": [["res_x", {"num_layers": 4}], ["compress_space_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 6}], ["compress_time_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 4}], ["compress_all_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 2}], ["compress_all_res", {"multiplier": 1}],
                       ["res_x", {"num_layers": 2}]],
    "decoder_blocks": [["res_x", {"num_layers": 4}], ["compress_space", {"multiplier": 2}],
                       ["res_x", {"num_layers": 6}], ["compress_time", {"multiplier": 2}],
                       ["res_x", {"num_layers": 4}], ["compress_all", {"multiplier": 1}],
                       ["res_x", {"num_layers": 2}], ["compress_all", {"multiplier": 2}],
                       ["res_x", {"num_layers": 2}]],
    "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": False,
    "normalize_latent_channels": False, "encoder_base_channels": 128, "decoder_base_channels": 128,
    "spatial_padding_mode": "zeros",
}
"""The "vae" entry of the config that LTX-2's checkpoints carry in their safetensors metadata, which
ComfyUI's VAE loader passes to VideoVAE (comfy/sd.py: `json.loads(metadata["config"])["vae"]`)."""


LTXV_095_VAE_CONFIG = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3, "latent_channels": 128,
    "encoder_blocks": [["res_x", {"num_layers": 4}], ["compress_space_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 6}], ["compress_time_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 6}], ["compress_all_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 2}], ["compress_all_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 2}]],
    "decoder_blocks": [["res_x", {"num_layers": 5, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 2}],
                       ["res_x", {"num_layers": 5, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 2}],
                       ["res_x", {"num_layers": 5, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 2}],
                       ["res_x", {"num_layers": 5, "inject_noise": False}]],
    "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": True,
}
"""LTX-Video 0.9.5+'s VAE config as ComfyUI builds it for such a file without metadata (its VideoVAE
"version 2": 1024 channels in the first decoder block, an encoder with residual downsamplers,
timestep-conditioned; no padding mode given, so the decoder pads space by reflection)."""


def ltxv_095_config() -> dict:
    """A copy of LTXV_095_VAE_CONFIG."""
    return json.loads(json.dumps(LTXV_095_VAE_CONFIG))


def randomise(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Give every weight of `module` PyTorch's default initialisation (seeded), in place.

    Timestep-conditioning tables get N(0, 0.1) and the timestep multiplier 1000 (LTX's value); the latent
    statistics unit std and zero mean, so the latent's scale is kept.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for m in module.modules():
            for base in (torch.nn.Conv3d, torch.nn.Conv2d, torch.nn.Linear):
                if isinstance(m, base):
                    base.reset_parameters(m)  # torch's own: ComfyUI's op classes make theirs a no-op
                    break
        for name, p in module.named_parameters():
            if "scale_shift_table" in name:
                torch.nn.init.normal_(p, std=0.1)
            elif name.endswith("timestep_scale_multiplier"):
                p.data.fill_(1000.0)
        for name, b in module.named_buffers():
            if name.endswith("std-of-means"):
                b.fill_(1.0)
            elif name.endswith("mean-of-means"):
                b.zero_()
    return module


def real_video_vae(config: dict, seed: int = 0):
    """ComfyUI's VideoVAE module at `config`, random weights (see `randomise`), eval mode."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    return randomise(VideoVAE(config=config), seed).eval()


def real_vae(config: dict, seed: int = 0):
    """A comfy.sd.VAE loaded by ComfyUI's own loader from a random-weight state dict and the config metadata."""
    import comfy.sd

    sd = real_video_vae(config, seed).state_dict()
    return comfy.sd.VAE(sd=sd, metadata={"config": json.dumps({"vae": config})})


def builds_ltx2_vae() -> bool:
    """Whether this ComfyUI's VideoVAE builds LTX-2's config (its space-only and time-only up/downsamplers)."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    try:
        with torch.device("meta"):
            VideoVAE(config=LTX2_VAE_CONFIG)
    except Exception:  # an older VideoVAE refuses the block names with a ValueError / KeyError
        return False
    return True


CARD_GIB = {"24 GB": 24, "12 GB": 12}
"""The cards the tiled decode's accounting is checked for, with their memory in GiB."""

CARD_SETTINGS = {
    ("LTX-2", "24 GB"): {}, ("LTX-2", "12 GB"): {},
    ("LTX-2.5", "24 GB"): {}, ("LTX-2.5", "12 GB"): {"spatial_tile": 256},
}
"""The tiled decode node's inputs (beyond its defaults) that fit a 4K clip (3840 x 2176 x 121) on each card by the
pack's accounting (docs/vae-decode.md, tests/ltx/vae/test_decode_memory.py, bench/memory_4k.py)."""

RESERVE_GIB = 1.0
"""What a card keeps beside the decode's own accounting: the CUDA context and ComfyUI's reserve."""


def accounting_vae(model: str, dtype: torch.dtype = torch.bfloat16):
    """The LTX-2 or LTX-2.5 VAE at its published configuration on the meta device (no memory), behind the stand-in
    a worker rank decodes with (`ltx.vae.job.VaeReplica`: what the tiled decode reads of a ComfyUI VAE), for the
    pack's memory accounting (`TiledDecode.memory`)."""
    from ltx_tdp.ltx.vae.job import VaeReplica, VaeSpec
    from ltx_tdp.tiling import LTX_GEOMETRY

    with torch.device("meta"):
        if model == "LTX-2":
            from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

            module = VideoVAE(config=json.loads(json.dumps(LTX2_VAE_CONFIG)))
        else:
            from comfy.ldm.lightricks.vae.na_diffusion_decoder import CausalDiffusionVAE

            module = CausalDiffusionVAE(config=None)  # ComfyUI's published LTX-2.5 configuration
    return VaeReplica(module.to(dtype).eval(), VaeSpec(LTX_GEOMETRY, 128, 3, dtype, 0.0, False), torch.device("cpu"))
