"""Helpers shared by the in-process LTX tests: load the tiny model, make conditioning, call a model
through ComfyUI's real wrapper path."""

from __future__ import annotations

from typing import Any

import torch


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """Seeded standard normal noise (tests are reproducible run to run)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def load_ltxv(comfy, model_names) -> Any:
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxv"], weight_dtype="default")
    return model


def load_vae(model_names) -> Any:
    """The tiny LTX VAE, built by ComfyUI's own comfy.sd.VAE from the file's metadata config."""
    import comfy.sd
    import comfy.utils
    import folder_paths

    sd, meta = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", model_names["vae"]),
                                           return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=meta)


def conditioning(seed: int = 0, tokens: int = 8, dim: int = 16, frame_rate: float = 25.0) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, tokens, dim, generator=gen),
             {"attention_mask": torch.ones(1, tokens, dtype=torch.long), "frame_rate": frame_rate}]]


def tiling(frames=(1, 0), height=(1, 0), width=(1, 0)):
    from ltx_tdp.tiling import AxisTiling, TileCountConfig

    return TileCountConfig(AxisTiling(*frames), AxisTiling(*height), AxisTiling(*width))


def patch(model, tiles, normalize: bool = True, audio_mode: str = "held", group: Any = None):
    """`model` patched by the pack's one entry point for `tiles` (a TileCountConfig)."""
    from ltx_tdp.ltx.model import apply_tdp

    return apply_tdp(model, tiles, group=group, normalize_positions=normalize, audio_mode=audio_mode)


def tdp_2x2(model, group: Any = None, **kw: Any):
    """`model` patched for 2 x 2 spatial tiles (overlap 2), its tiles shared by `group` when given."""
    return patch(model, tiling(height=(2, 2), width=(2, 2)), group=group, **kw)


def ksample(comfy, model, latent: dict, seed: int = 3, steps: int = 2, cfg: float = 1.0, denoise: float = 0.6,
            positive=None, negative=None) -> torch.Tensor:
    positive = positive or conditioning(1)
    negative = negative or conditioning(2)
    (out,) = comfy.run_node("KSampler", model=model, seed=seed, steps=steps, cfg=cfg, sampler_name="euler",
                            scheduler="simple", positive=positive, negative=negative, latent_image=latent,
                            denoise=denoise)
    return out["samples"]


GUIDANCE = {
    "none": None,
    "stg": ("LTXVSpatioTemporalGuidance", dict(scale=2.0, blocks="0", start_percent=0.0, end_percent=1.0)),
    "modality": ("LTXVModalityGuidance", dict(modality_scale=3.0, start_percent=0.0, end_percent=1.0)),
}
"""LTX-2.5's guidance nodes as the tests apply them: kind -> (node, its inputs), None for no guidance. STG
and modality guidance add model calls with their own transformer options."""


PROBE_KEY = "tdp_test_probe"
"""The wrapper key of a test's probe inside TDP's wrappers (its own key, as another pack's wrapper would have)."""


def probe_tile_calls(model_patcher, record: list, replace_output: bool = False):
    """Add an APPLY_MODEL wrapper inside TDP's that records each tile call (and optionally returns x)."""
    import comfy.patcher_extension as ext

    def wrapper(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kw):
        record.append({"x": x.clone(), **{k: v for k, v in kw.items()}})
        if replace_output:
            return x
        return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kw)

    model_patcher.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, PROBE_KEY, wrapper)
    return model_patcher


def call_model(model_patcher, x: torch.Tensor, sigma: float, **conds: Any) -> torch.Tensor:
    """One apply_model call through the real wrapper path, with the patcher's object patches applied."""
    import comfy.model_management

    comfy.model_management.load_models_gpu([model_patcher])
    base = model_patcher.model
    gen = torch.Generator().manual_seed(11)
    ctx = conds.pop("c_crossattn", torch.randn(x.shape[0], 8, 16, generator=gen))
    conds.setdefault("attention_mask", torch.ones(x.shape[0], 8, dtype=torch.long))
    conds.setdefault("frame_rate", 25.0)
    opts = {"wrappers": model_patcher.wrappers}
    with torch.inference_mode():
        return base.apply_model(x, torch.full((x.shape[0],), sigma), c_crossattn=ctx, transformer_options=opts,
                                **conds)


def smooth_frames(frames: int, height: int, width: int, seed: int) -> torch.Tensor:
    """Smooth seeded RGB frames (frames, height, width, 3) in [0, 1], as LoadImage / LoadVideo hand them on."""
    coarse = torch.rand(frames, 3, 4, 6, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear").permute(0, 2, 3, 1)


def add_iclora_guides(comfy, vae, latent: dict, positive, negative, factor: int = 2) -> tuple:
    """(positive, negative, latent) with the guides an IC-LoRA workflow adds, by ComfyUI's own LTXVAddGuide: a
    control video as long as the latent at frame 0 with `iclora_parameters` {"reference_downscale_factor": factor}
    (what GetICLoRAParameters reads from a factor-2 IC-LoRA such as the union-control ref0.5), a pixel attention
    mask (zero on the top quarter, a ramp across the width) and strength 0.8; then a keyframe image (factor 1,
    strength 1) on the last frame."""
    _, _, f, h, w = latent["samples"].shape
    frames, height, width = 8 * (f - 1) + 1, 32 * h, 32 * w
    mask = torch.linspace(0.2, 1.0, width).expand(height, width).clone()
    mask[: height // 4] = 0.0
    positive, negative, latent = comfy.run_node(
        "LTXVAddGuide", positive=positive, negative=negative, vae=vae, latent=latent,
        image=smooth_frames(frames, height, width, 4), frame_idx=0, strength=0.8, attention_mask=mask[None],
        iclora_parameters={"reference_downscale_factor": factor})
    return comfy.run_node("LTXVAddGuide", positive=positive, negative=negative, vae=vae, latent=latent,
                          image=smooth_frames(1, height, width, 5), frame_idx=frames - 1, strength=1.0)
