"""API-format prompts (what `POST /prompt` takes) for the headless server tests and the example command.

`untiled_and_tdp_prompt`, the main job's (scripts/run_example.py): a LATENT file refined untiled and with TDP, both
saved as LATENT files. `tdp_upscale_prompt`, the TDP upscale workflow the way the pack is meant to be used:

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


def tiling_node(tiles: tuple[int, int] = (2, 2), overlap: int = 2) -> dict[str, Any]:
    """LTXTDPTileConfig in API format: `tiles` = (height, width), one frame tile, no overlap on an untiled axis."""
    h_tiles, w_tiles = tiles
    return {"class_type": "LTXTDPTileConfig",
            "inputs": {"frames_tiles": 1, "frames_overlap": 0,
                       "height_tiles": h_tiles, "height_overlap": overlap if h_tiles > 1 else 0,
                       "width_tiles": w_tiles, "width_overlap": overlap if w_tiles > 1 else 0}}


def tdp_node(model: str, tiling: str = "tiling") -> dict[str, Any]:
    """The TDP patcher in API format on node `model`'s MODEL, with node `tiling`'s layout (positions normalised,
    audio held)."""
    return {"class_type": "LTXTDPModelPatcher",
            "inputs": {"model": [model, 0], "tiling": [tiling, 0], "normalize_positions": True,
                       "audio_mode": AUDIO_MODE_HELD}}


def multigpu_split_node(model: str, gpus: int = 2) -> dict[str, Any]:
    """Core's MultiGPU CFG Split (MultiGPU_WorkUnits) in API format on node `model`'s MODEL."""
    return {"class_type": "MultiGPU_WorkUnits", "inputs": {"model": [model, 0], "max_gpus": gpus}}


def _tdp_nodes(tiles: tuple[int, int], overlap: int) -> dict[str, Any]:
    """"tiling" (`tiling_node`) and "tdp" (the patcher on the node "unet"), in API format."""
    return {"tiling": tiling_node(tiles, overlap), "tdp": tdp_node("unet")}


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
        **_tdp_nodes(tiles, overlap),
        "stage2": {"class_type": "KSampler",
                   "inputs": {"model": ["tdp", 0], "seed": seed + 1, "steps": steps, "cfg": 1.0,
                              "sampler_name": "euler", "scheduler": "simple", "positive": ["positive", 0],
                              "negative": ["negative", 0], "latent_image": ["upscale", 0], "denoise": denoise}},
        "vae": {"class_type": "TDPTestVAELoader", "inputs": {"vae_name": vae_name}},
        "decode": {"class_type": "VAEDecode", "inputs": {"samples": ["stage2", 0], "vae": ["vae", 0]}},
        "save": {"class_type": "SaveImage", "inputs": {"images": ["decode", 0], "filename_prefix": filename_prefix}},
    }


def untiled_and_tdp_prompt(*, unet_name: str, latent_name: str, sigmas: tuple[float, float, float], noise_seed: int,
                           tiles: tuple[int, int], overlap: int, context_seed: int, context_tokens: int,
                           context_dim: int, frame_rate: float, filename_prefix: str) -> dict[str, Any]:
    """One prompt that refines the LATENT file `latent_name` (in ComfyUI's input folder) twice, with the same noise,
    sigmas and conditioning: with the model as loaded (untiled) and through the pack's TDP patcher. SaveLatent writes
    `<filename_prefix>_untiled` and `<filename_prefix>_tdp`.

    Each refine is SamplerCustomAdvanced (RandomNoise `noise_seed`, BasicGuider, euler) from `sigmas[0]` on the clean
    latent. The sigmas come from KarrasScheduler with 2 steps and rho 1, a straight line from sigma_max to sigma_min
    then 0 (ComfyUI 0.3.75 has no ManualSigmas); for 0.625 and 0.4 it gives exactly (0.625, 0.4, 0) in float32.
    The conditioning is TDPTestRandomConditioning (`context_seed`: torch.randn of (1, tokens, dim)) with
    LTXVConditioning's frame rate.
    """
    first, second, last = sigmas
    if last != 0.0 or not first > second > 0.0:
        raise ValueError(f"sigmas must be (first, second, 0) with first > second > 0, got {sigmas}")
    refine = {"noise": ["noise", 0], "sampler": ["sampler", 0], "sigmas": ["sigmas", 0], "latent_image": ["latent", 0]}
    return {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": unet_name, "weight_dtype": "default"}},
        "text": {"class_type": "TDPTestRandomConditioning",
                 "inputs": {"seed": context_seed, "tokens": context_tokens, "dim": context_dim}},
        "conditioning": {"class_type": "LTXVConditioning",
                         "inputs": {"positive": ["text", 0], "negative": ["text", 0], "frame_rate": frame_rate}},
        "latent": {"class_type": "LoadLatent", "inputs": {"latent": latent_name}},
        "noise": {"class_type": "RandomNoise", "inputs": {"noise_seed": noise_seed}},
        "sampler": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "sigmas": {"class_type": "KarrasScheduler",
                   "inputs": {"steps": 2, "sigma_max": first, "sigma_min": second, "rho": 1.0}},
        **_tdp_nodes(tiles, overlap),
        "guider_untiled": {"class_type": "BasicGuider",
                           "inputs": {"model": ["unet", 0], "conditioning": ["conditioning", 0]}},
        "guider_tdp": {"class_type": "BasicGuider", "inputs": {"model": ["tdp", 0], "conditioning": ["conditioning", 0]}},
        "refine_untiled": {"class_type": "SamplerCustomAdvanced", "inputs": {"guider": ["guider_untiled", 0], **refine}},
        "refine_tdp": {"class_type": "SamplerCustomAdvanced", "inputs": {"guider": ["guider_tdp", 0], **refine}},
        "save_untiled": {"class_type": "SaveLatent",
                         "inputs": {"samples": ["refine_untiled", 0], "filename_prefix": f"{filename_prefix}_untiled"}},
        "save_tdp": {"class_type": "SaveLatent",
                     "inputs": {"samples": ["refine_tdp", 0], "filename_prefix": f"{filename_prefix}_tdp"}},
    }
