"""Turn a ComfyUI LTX MODEL into a TDP one (`apply_tdp`): wrappers and an object patch on a clone, nothing global.

* APPLY_MODEL wrapper: every model call runs per tile (ltx.model.call) and returns the blended x0; a step cache
  (EasyCache) runs once around the tiles, on the whole frame (ltx.model.step_cache).
* CALC_COND_BATCH wrapper: with ComfyUI's MultiGPU clones, the tiles of each call spread over their devices
  (ltx.model.devices).
* OUTER_SAMPLE wrapper: warns when the first sigma is high enough for tiles to drift apart, and in the
  held audio mode (LTX-2) makes the audio clean conditioning for the whole stage (ltx.model.audio).
* object patch `diffusion_model.patchifier`: per-tile positions (ltx.model.positions).
* object patch `diffusion_model.keyframes_abs_pos_mask` (LTX-2.5, ComfyUI 0.32+): each tile marks the tokens the
  untiled call marks (ltx.model.keyframes).
* ComfyUI's memory estimates sized by the largest tile (ltx.model.memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ...package import PACKAGE
from ...tiling import LatentGeometry, PositionRange, TilingConfig, TilingError
from ...tiling.position_range import largest_tile
from ...tiling.ranks import ONE_RANK, TileRanks
from ..comfy_internals import PATCHER, require
from ..errors import UnsupportedInput
from ..loader_factory import ensure_loader_factory
from ..progress import TileProgress, check_interrupt, interruptible
from .audio import AUDIO_HELD, audio_mode as audio_mode_value, audio_not_ready, has_audio, held_denoise_mask, restore_audio
from .call import TDPSettings, TiledModelCall
from .devices import DEVICES_KEY, calc_cond_batch_wrapper, run_on_devices
from .facts import geometry_of, ltx_diffusion_model, position_range
from .job import ModelJob, model_ranks
from .keyframes import MASK_ATTRIBUTE, has_marker_mask, marker_mask_patch
from .memory import register_tile_memory
from .positions import ShiftedGridPatchifier
from .step_cache import per_tile_wrappers, run_with_step_cache

log = logging.getLogger(__name__)

WRAPPER_KEY = PACKAGE
SEQUENCE_KEY = PACKAGE + ".sequence"
"""The wrapper key of the LTX Sequence Parallel node (ltx.sequence), which TDP refuses to share a MODEL with."""
DRIFT_WARNING_SIGMA = 0.68
"""A first sigma above this re-injects enough noise for tiles to drift apart (upstream stage 2 starts at 0.625).

Measured by bench/quality (bench/results/quality.md): on a small LTXV trained on synthetic latent videos,
2 x 2 tiles with overlap 5 each refined on their own differ in their overlaps by more than a tenth of the
content's RMS from a first sigma of 0.68 on (0.080 at 0.625, 0.104 at 0.7, 0.222 at 0.9). The per-step
blend hid that drift in those runs (no seam, no border loss up to 0.9): the warning is a caution."""


class TDPModelWrapper:
    """The APPLY_MODEL wrapper. Holds only settings and the ranks that share the tiles."""

    def __init__(self, settings: TDPSettings, geometry: LatentGeometry, ranks: TileRanks = ONE_RANK,
                 positions: PositionRange | None = None):
        self.settings = settings
        self.geometry = geometry
        self.ranks = ranks
        self.positions = positions
        self._checked: set[tuple[int, ...]] = set()

    def check_range(self, call: TiledModelCall, frame_rate: Any) -> None:
        """Warn once per latent shape when its largest tile leaves the model's trained position range."""
        if self.positions is None or call.plan.shape in self._checked:
            return
        self._checked.add(call.plan.shape)
        rate = float(frame_rate) if isinstance(frame_rate, (int, float)) else None
        outside = self.positions.check(call.plan, rate, self.geometry)
        if outside:
            log.warning("LTX TDP: tiles of %s latent cells are %s; use more tiles",
                        " x ".join(map(str, largest_tile(call.plan))), outside)

    def __call__(self, executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
        if c_concat is not None:
            raise TilingError("TDP cannot tile concat conditioning (c_concat); LTX models do not use it")
        per_tile_wrappers(transformer_options, "tile")
        return run_with_step_cache(executor, x, t, c_crossattn, transformer_options, kwargs,
                                   lambda options: self.tiled(executor, x, t, c_crossattn, control, options, kwargs))

    def tiled(self, executor, x, t, c_crossattn, control, transformer_options, kwargs):
        """The blended x0 of one model call, its tiles run here, on the MultiGPU devices or over the ranks."""
        if transformer_options.get(DEVICES_KEY) is not None:  # ComfyUI's MultiGPU clones (ltx.model.devices)
            return run_on_devices(self, transformer_options[DEVICES_KEY], executor, x, t, c_crossattn, control,
                                  transformer_options, kwargs, output_dtype(x))
        call = TiledModelCall(self.settings, self.geometry, x, kwargs)
        self.check_range(call, kwargs.get("frame_rate"))

        def run_tile(x_tile: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
            return executor(x_tile, t, None, c_crossattn, control, transformer_options, **kw)

        job = None
        if self.ranks is not ONE_RANK:
            job = ModelJob.of(call, x, t, c_crossattn, control, transformer_options, WRAPPER_KEY)
        return run_tiles(call, run_tile, transformer_options, self.ranks, job)


def run_tiles(call: TiledModelCall, run_tile: Callable[[torch.Tensor, dict[str, Any]], torch.Tensor],
              transformer_options: dict[str, Any], ranks: TileRanks = ONE_RANK, job: Any = None) -> torch.Tensor:
    """This process's tiles of `call`, one after another, summed over `ranks`: the blended x0 of the whole call.

    The one tile loop of a model call: alone (ONE_RANK) this process runs every tile; with other ranks it runs
    its round-robin share while they run `job`. Progress counts tile passes over the sampling run; an
    interrupt is honoured before each tile and once more when the ranks' sum is in.
    """
    progress = TileProgress(len(call.tiles), transformer_options)

    def run(rank: int, world: int, before: Callable[[Any], None], on_tile: Callable[[int, int, Any], None]):
        return call.partial(run_tile, rank, world, before_tile=before, on_tile=on_tile)

    flat = ranks.reduce(job, interruptible(run, progress, len(call.tiles)))
    check_interrupt()
    progress.finish()
    return call.finish(flat, output_dtype(call.video))


def output_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a blended x0 is returned in: at least fp32, like ComfyUI's own denoised output."""
    return torch.float32 if not x.is_floating_point() else torch.promote_types(x.dtype, torch.float32)


def outer_sample_wrapper(settings: TDPSettings):
    """The OUTER_SAMPLE wrapper: the drift warning, and for LTX-2 in held mode the audio as clean conditioning.

    Held mode hands the sampler a denoise mask that is 0 on the audio (ltx.model.audio.held_denoise_mask): every
    model call then sees the clean input audio at timestep 0 and every x0 the sampler reports carries it.
    The audio part of the output is the input's, bit for bit (the sampler's last step alone could round it).
    """

    def wrapper(executor, noise, latent_image, sampler, sigmas, denoise_mask=None, callback=None,
                disable_pbar=False, seed=None, latent_shapes=None, **kwargs):
        if sigmas is not None and len(sigmas) and float(sigmas[0]) > DRIFT_WARNING_SIGMA:
            log.warning(
                "LTX TDP: the first sigma is %.3f. Tiles denoised from this much noise can drift apart into "
                "unrelated content; use TDP as an upscale stage with a low first sigma (upstream: 0.625, 0.4, 0).",
                float(sigmas[0]))
        held = settings.audio_mode == AUDIO_HELD and has_audio(latent_shapes)
        if held:
            reason = audio_not_ready(latent_image, latent_shapes, sigmas)
            if reason is not None:
                log.warning(
                    "LTX TDP: audio_mode 'held' keeps the audio of this sampler exactly as it enters, but %s: "
                    "the audio that leaves this stage will be that, not generated audio. Put the TDP patcher on "
                    "the upscale (second) stage only, after a stage that generated the audio, or set audio_mode "
                    "to 'average'.", reason)
            guider = getattr(executor, "class_obj", None)
            device = getattr(getattr(guider, "model_patcher", None), "load_device", None)
            if device is None:
                device = denoise_mask.device if denoise_mask is not None else latent_image.device
            denoise_mask = held_denoise_mask(denoise_mask, latent_shapes, latent_image.shape[0], device)
        out = executor(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed,
                       latent_shapes=latent_shapes, **kwargs)
        if held:
            out = restore_audio(out, latent_image, latent_shapes)
        return out

    return wrapper


def has_wrapper(model_patcher: Any, key: str) -> bool:
    """Whether `model_patcher` carries an APPLY_MODEL wrapper under `key` (TDP's, or the sequence-parallel one)."""
    import comfy.patcher_extension as ext

    return bool(getattr(model_patcher, "wrappers", {}).get(ext.WrappersMP.APPLY_MODEL, {}).get(key))


def apply_tdp(model_patcher: Any, tiling: TilingConfig, *, group: Any = None, normalize_positions: bool = True,
              audio_mode: str = AUDIO_HELD) -> Any:
    """A clone of `model_patcher` whose every model call runs per tile of `tiling`; the input MODEL is untouched.

    The one way to patch a model (the node, the tests, the benchmarks and the GPU check call it). `group` is a
    multigpu TDPGroup whose ranks share the tiles (None: this process runs them all); `audio_mode` one of
    ltx.model.audio.AUDIO_MODES or a label older workflows saved. A second TDP patch replaces the first.
    Raises UnsupportedInput for a MODEL that is not LTX or an unknown audio mode.
    """
    import comfy.patcher_extension as ext

    require(PATCHER)
    settings = TDPSettings(tiling, normalize_positions, audio_mode_value(audio_mode))
    diffusion_model = ltx_diffusion_model(model_patcher)
    if has_wrapper(model_patcher, SEQUENCE_KEY):
        raise UnsupportedInput("the LTX TDP Model Patcher and LTX Sequence Parallel cannot go on the same MODEL: TDP "
                               "is for stage 2 (the upscale), sequence parallelism for stage 1. Patch the stage-2 "
                               "model with TDP and the stage-1 model with LTX Sequence Parallel.")
    m = model_patcher.clone()
    ensure_loader_factory(m)  # MultiGPU can copy a GGUF model too (ltx.loader_factory)
    ranks = model_ranks(group, m) if group is not None else ONE_RANK
    for kind in (ext.WrappersMP.APPLY_MODEL, ext.WrappersMP.OUTER_SAMPLE, ext.WrappersMP.CALC_COND_BATCH):
        m.remove_wrappers_with_key(kind, WRAPPER_KEY)
    m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, WRAPPER_KEY,
                           TDPModelWrapper(settings, geometry_of(diffusion_model), ranks, position_range(m)))
    m.add_wrapper_with_key(ext.WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, outer_sample_wrapper(settings))
    m.add_wrapper_with_key(ext.WrappersMP.CALC_COND_BATCH, WRAPPER_KEY, calc_cond_batch_wrapper)
    register_tile_memory(m, settings)  # ComfyUI sizes the run by the largest tile (ltx.model.memory)
    inner = diffusion_model.patchifier
    if isinstance(inner, ShiftedGridPatchifier):
        inner = inner._inner
    m.add_object_patch("diffusion_model.patchifier", ShiftedGridPatchifier(inner))
    if has_marker_mask(diffusion_model):
        m.add_object_patch("diffusion_model." + MASK_ATTRIBUTE, marker_mask_patch(diffusion_model, m.object_patches))
    return m
