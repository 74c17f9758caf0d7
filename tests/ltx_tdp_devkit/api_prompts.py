"""API-format prompts (what `POST /prompt` takes) for the headless server tests and the example command.

The TDP upscale workflow, the way the pack is meant to be used:

    stage 1   UNETLoader -> KSampler (full denoise) on EmptyLTXVLatentVideo at half the final size
    upscale   LatentUpscaleBy x2
    stage 2   LTXTDPTileConfig + LTXTDPModelPatcher -> KSampler with a low denoise (sigmas ~0.66, 0.47, 0:
              close to upstream's stage-2 0.625, 0.4, 0), on the upscaled latent
    decode    TDPTestVAELoader -> VAEDecode -> SaveImage

Text conditioning comes from the test node pack (TDPTestRandomConditioning): real LTX text encoders are
many GB.
"""

from __future__ import annotations

from typing import Any

AUDIO_MODE_HELD = "held"
"""The patcher's default audio_mode option (only LTX-2 latents carry audio)."""

STAGE2_DENOISE = 0.15
"""KSampler (simple scheduler, 2 steps) on LTXV then runs sigmas 0.661, 0.472, 0 (upstream stage 2: 0.625, 0.4, 0),
below the patcher's drift warning."""


def tdp_upscale_prompt(*, unet_name: str, vae_name: str, width: int, height: int, length: int,
                       tiles: tuple[int, int] = (2, 2), overlap: int = 2, seed: int = 0, steps: int = 2,
                       denoise: float = STAGE2_DENOISE, context_dim: int = 16,
                       filename_prefix: str = "ltx_tdp") -> dict[str, Any]:
    """The TDP upscale workflow producing `length` frames of `width` x `height` pixels.

    `tiles` is (height tiles, width tiles) of stage 2, `overlap` their overlap in latent cells. Stage 1 runs
    at half the size; both sizes must be multiples of 64 px so that the half size is whole latent cells.
    Vary `seed` between prompts: ComfyUI serves an identical prompt from its cache.
    """
    if width % 64 or height % 64:
        raise ValueError(f"width and height must be multiples of 64 px, got {width} x {height}")
    h_tiles, w_tiles = tiles
    return {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": unet_name, "weight_dtype": "default"}},
        "positive": {"class_type": "TDPTestRandomConditioning",
                     "inputs": {"seed": 2 * seed + 1, "tokens": 8, "dim": context_dim}},
        "negative": {"class_type": "TDPTestRandomConditioning",
                     "inputs": {"seed": 2 * seed + 2, "tokens": 8, "dim": context_dim}},
        "empty": {"class_type": "EmptyLTXVLatentVideo",
                  "inputs": {"width": width // 2, "height": height // 2, "length": length, "batch_size": 1}},
        "stage1": {"class_type": "KSampler",
                   "inputs": {"model": ["unet", 0], "seed": seed, "steps": steps, "cfg": 1.0,
                              "sampler_name": "euler", "scheduler": "simple", "positive": ["positive", 0],
                              "negative": ["negative", 0], "latent_image": ["empty", 0], "denoise": 1.0}},
        "upscale": {"class_type": "LatentUpscaleBy",
                    "inputs": {"samples": ["stage1", 0], "upscale_method": "bilinear", "scale_by": 2.0}},
        "tiling": {"class_type": "LTXTDPTileConfig",
                   "inputs": {"frames_tiles": 1, "frames_overlap": 0,
                              "height_tiles": h_tiles, "height_overlap": overlap if h_tiles > 1 else 0,
                              "width_tiles": w_tiles, "width_overlap": overlap if w_tiles > 1 else 0}},
        "tdp": {"class_type": "LTXTDPModelPatcher",
                "inputs": {"model": ["unet", 0], "tiling": ["tiling", 0], "normalize_positions": True,
                           "audio_mode": AUDIO_MODE_HELD}},
        "stage2": {"class_type": "KSampler",
                   "inputs": {"model": ["tdp", 0], "seed": seed + 1, "steps": steps, "cfg": 1.0,
                              "sampler_name": "euler", "scheduler": "simple", "positive": ["positive", 0],
                              "negative": ["negative", 0], "latent_image": ["upscale", 0], "denoise": denoise}},
        "vae": {"class_type": "TDPTestVAELoader", "inputs": {"vae_name": vae_name}},
        "decode": {"class_type": "VAEDecode", "inputs": {"samples": ["stage2", 0], "vae": ["vae", 0]}},
        "save": {"class_type": "SaveImage", "inputs": {"images": ["decode", 0], "filename_prefix": filename_prefix}},
    }
