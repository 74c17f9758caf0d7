"""Turn a ComfyUI LTX MODEL into a TDP one: wrappers and an object patch on a clone, nothing global.

* APPLY_MODEL wrapper: every model call runs per tile (ltx.model_call) and returns the blended x0.
* OUTER_SAMPLE wrapper: warns when the first sigma is high enough for tiles to drift apart, and in the
  frozen audio mode hands back the audio latent that entered the stage, bit for bit.
* object patch `diffusion_model.patchifier`: per-tile positions (ltx.positions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ..tiling import TilingError
from .model_call import AUDIO_FROZEN, ModelGeometry, TDPSettings, TiledModelCall, pack_latents, unpack_latents
from .positions import ShiftedGridPatchifier

log = logging.getLogger(__name__)

WRAPPER_KEY = "ltx_tdp"
DRIFT_WARNING_SIGMA = 0.8
"""A first sigma above this re-injects enough noise for tiles to drift apart (upstream stage 2 starts at 0.625)."""

# A group (multigpu) can take over the per-tile loop; it is handed the call and the plain executor.
TileRunner = Callable[[TiledModelCall, Callable[[torch.Tensor, dict[str, Any]], torch.Tensor], dict[str, Any]], torch.Tensor]


def ltx_diffusion_model(model_patcher: Any) -> Any:
    """The LTX diffusion model inside a ComfyUI MODEL, or a TilingError saying why this is not one."""
    diffusion_model = getattr(getattr(model_patcher, "model", None), "diffusion_model", None)
    if diffusion_model is None or not hasattr(diffusion_model, "patchifier") or not hasattr(diffusion_model, "vae_scale_factors"):
        name = type(diffusion_model).__name__ if diffusion_model is not None else type(model_patcher).__name__
        raise TilingError(f"TDP needs an LTX-Video or LTX-2 model; this MODEL is {name}")
    return diffusion_model


def geometry_of(diffusion_model: Any) -> ModelGeometry:
    return ModelGeometry(
        scale=tuple(int(s) for s in diffusion_model.vae_scale_factors),
        causal_time=bool(getattr(diffusion_model, "causal_temporal_positioning", False)),
    )


class TDPModelWrapper:
    """The APPLY_MODEL wrapper. Holds only settings and, optionally, a multi-GPU runner."""

    def __init__(self, settings: TDPSettings, geometry: ModelGeometry, runner: TileRunner | None = None):
        self.settings = settings
        self.geometry = geometry
        self.runner = runner

    def __call__(self, executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
        if c_concat is not None:
            raise TilingError("TDP cannot tile concat conditioning (c_concat); LTX models do not use it")
        call = TiledModelCall(self.settings, self.geometry, x, kwargs)

        def run_tile(x_tile: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
            return executor(x_tile, t, c_concat, c_crossattn, control, transformer_options, **kw)

        if self.runner is not None:
            return self.runner(call, run_tile, {"t": t, "c_crossattn": c_crossattn, "control": control,
                                                "transformer_options": transformer_options})
        return run_tiles_here(call, run_tile, transformer_options)


def run_tiles_here(call: TiledModelCall, run_tile: Callable[[torch.Tensor, dict[str, Any]], torch.Tensor],
                   transformer_options: dict[str, Any]) -> torch.Tensor:
    """Every tile of `call` in this process, one after another: the blended x0 of the whole call.

    Progress counts tile passes over the sampling run; an interrupt is honoured before each tile.
    """
    progress = TileProgress(len(call.tiles), transformer_options)
    flat = call.partial(run_tile, before_tile=check_interrupt, on_tile=progress.tile_done)
    return call.finish(flat, output_dtype(call.video))


def output_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a blended x0 is returned in: at least fp32, like ComfyUI's own denoised output."""
    return torch.float32 if not x.is_floating_point() else torch.promote_types(x.dtype, torch.float32)


def check_interrupt(_tile: Any = None) -> None:
    """Raise ComfyUI's interrupt exception if the user pressed Cancel (called before every tile)."""
    import comfy.model_management

    comfy.model_management.throw_exception_if_processing_interrupted()


class TileProgress:
    """One progress bar over all tile passes of the sampling run: step s, tile i of T -> s * T + i."""

    def __init__(self, n_tiles: int, transformer_options: dict[str, Any]):
        self.n_tiles = n_tiles
        sigmas = transformer_options.get("sample_sigmas")
        current = transformer_options.get("sigmas")
        self.steps = max(len(sigmas) - 1, 1) if sigmas is not None else 1
        self.step = 0
        if sigmas is not None and current is not None:
            diffs = (sigmas[:-1].float().cpu() - float(current.flatten()[0])).abs()
            self.step = int(torch.argmin(diffs)) if diffs.numel() else 0
        self.bar = None
        if n_tiles > 1:
            import comfy.utils

            self.bar = comfy.utils.ProgressBar(self.steps * n_tiles)

    def tile_done(self, done: int, total: int, _tile: Any) -> None:
        if self.bar is not None:
            self.bar.update_absolute(self.step * self.n_tiles + done)


def outer_sample_wrapper(settings: TDPSettings):
    def wrapper(executor, noise, latent_image, sampler, sigmas, denoise_mask=None, callback=None,
                disable_pbar=False, seed=None, latent_shapes=None, **kwargs):
        if sigmas is not None and len(sigmas) and float(sigmas[0]) > DRIFT_WARNING_SIGMA:
            log.warning(
                "LTX TDP: the first sigma is %.3f. Tiles denoised from this much noise can drift apart into "
                "unrelated content; use TDP as an upscale stage with a low first sigma (upstream: 0.625, 0.4, 0).",
                float(sigmas[0]))
        out = executor(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed,
                       latent_shapes=latent_shapes, **kwargs)
        if settings.audio_mode == AUDIO_FROZEN and latent_shapes is not None and len(latent_shapes) > 1:
            parts_out = unpack_latents(out, latent_shapes)
            parts_in = unpack_latents(latent_image.to(out.device, out.dtype), latent_shapes)
            out = pack_latents([parts_out[0], *parts_in[1:]])
        return out

    return wrapper


def apply_tdp(model_patcher: Any, settings: TDPSettings, runner: TileRunner | None = None) -> Any:
    """A clone of `model_patcher` whose model calls run per tile. The input MODEL is left untouched."""
    import comfy.patcher_extension as ext

    diffusion_model = ltx_diffusion_model(model_patcher)
    m = model_patcher.clone()
    for kind in (ext.WrappersMP.APPLY_MODEL, ext.WrappersMP.OUTER_SAMPLE):
        m.remove_wrappers_with_key(kind, WRAPPER_KEY)  # a second TDP patcher replaces the first
    m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, WRAPPER_KEY,
                           TDPModelWrapper(settings, geometry_of(diffusion_model), runner))
    m.add_wrapper_with_key(ext.WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, outer_sample_wrapper(settings))
    inner = diffusion_model.patchifier
    if isinstance(inner, ShiftedGridPatchifier):
        inner = inner._inner
    m.add_object_patch("diffusion_model.patchifier", ShiftedGridPatchifier(inner))
    return m
