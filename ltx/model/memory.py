"""The memory ComfyUI is asked for by a TDP model: its largest tile's model call plus the pack's own buffers.

ComfyUI sizes a run with its model's `memory_required(input_shape, cond_shapes)` (`BaseModel`'s formula is
linear in the latent's area):

* before sampling, `comfy.sampler_helpers.estimate_memory` (at batch 2 for cond + uncond) decides how many
  weights are loaded and what else is unloaded (under Dynamic VRAM too);
* at each step `comfy.samplers._calc_cond_batch` runs cond and uncond as one batch only when
  `memory_required(batch) * 1.5` fits in the free memory.

Both are asked for a TDP model call's input, the whole frame, though the model only ever runs on a tile: at 4K
LTX-2 about 25 GiB at batch 1 for a 2 x 2 tile's 8. `TileMemory` answers for the largest tile instead, plus
what the pack itself holds on the device while it runs: the flat partial-sum accumulator of the whole frame
(ltx.model.call, fp64; one per device, into which the device sums all its work units), the tile's input as it
is cut (and packed, for LTX-2), and the window-weighted tile result in the accumulator's dtype (the result and
its product with the window). With ComfyUI's MultiGPU clones (ltx.model.devices) each other device also holds
its copy of the call's input (fp32; its small text context and masks aside); ComfyUI applies this one estimate
to every device it loads a clone on, so the copy is counted whenever the model has clones. With a step cache
(EasyCache, run once around the split call: ltx.model.step_cache) the whole frame's input, cast to the inference
dtype for the cache, is alive while the tiles run, and is counted too.

Three hooks on the TDP clone, none global:

* object patch `memory_required`: every question asked while the clone is loaded (the cond batching);
* PREPARE_SAMPLING wrapper: the estimate before sampling, asked before the clone's object patches are in
  force. It can only change the noise shape ComfyUI estimates for: it hands over the largest tile's shape with
  its last axis lengthened so that ComfyUI's own formula gives the tile's memory plus the pack's buffers
  (rounded up to a whole latent cell). Another pack's PREPARE_SAMPLING wrapper inside this one sees that shape;
* OUTER_SAMPLE wrapper: this run's latent shapes (a packed LTX-2 input does not say where the video ends).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

from ...tiling import VIDEO_AXES, TilingError, exact_sum_dtype, plan_tiles
from ...tiling.position_range import largest_tile
from .audio import AUDIO_AVERAGE
from .call import TDPSettings
from .facts import inference_dtype
from .step_cache import step_cache_wrappers

MEMORY_KEY = "ltx_tdp_memory"
INPUT_ITEMSIZE = 4
"""Bytes per value of a model call's input as ComfyUI's samplers hand it over (fp32)."""


class TileMemory:
    """`memory_required` of one TDP model (an object patch), and the wrappers that put it to use."""

    def __init__(self, settings: TDPSettings, base_model: Any):
        self.settings, self.model = settings, base_model
        self.latent_shapes: list[tuple[int, ...]] | None = None
        """The latent shapes of the run of this model now sampling; None between its runs."""
        self.other_devices = False
        """Whether the model sampling now has ComfyUI's MultiGPU clones (each holds a copy of a call's input)."""
        self.step_cache = False
        """Whether the model sampling now carries a step cache, run around the whole split call
        (ltx.model.step_cache): the whole frame's input in the inference dtype stays alive while the tiles run."""

    def __call__(self, input_shape: Sequence[int], cond_shapes: dict | None = None, **kwargs: Any) -> float:
        """Bytes a model call on `input_shape` needs as TDP runs it: ComfyUI's estimate for the largest tile
        plus the pack's own buffers, during this model's runs; ComfyUI's own estimate outside them (ComfyUI
        leaves a clone's object patches on the shared model when another clone is loaded) and where the shape
        is not a video TDP tiles. Other keywords (newer ComfyUI asks with `memory_efficient_attention=`) go on
        to the model's own estimate where it takes them, and are dropped where it does not."""
        cond_shapes = cond_shapes or {}
        if self.latent_shapes is None:
            return self._estimate(input_shape, cond_shapes, **kwargs)
        layout = self.layout(input_shape, _guide_tokens(cond_shapes.get("keyframe_idxs", ())))
        if layout is None:
            return self._estimate(input_shape, cond_shapes, **kwargs)
        tile_shape, extra = layout
        return self._estimate(tile_shape, cond_shapes, **kwargs) + extra

    def layout(self, input_shape: Sequence[int], guide_tokens: int) -> tuple[list[int], int] | None:
        """(the largest tile's input shape, the pack's own bytes) for a model call on `input_shape` with
        `guide_tokens` guide tokens appended; None for a shape TDP does not tile as a video."""
        batch = int(input_shape[0])
        if len(input_shape) == 5:
            video, extras = tuple(int(v) for v in input_shape[1:]), 0
        elif len(input_shape) == 3 and self.latent_shapes is not None and len(self.latent_shapes) > 1:
            video = tuple(int(v) for v in self.latent_shapes[0][1:])
            extras = int(input_shape[2]) - math.prod(video)
        else:
            return None
        channels, frames, height, width = video
        guides = guide_tokens // (height * width)
        if frames - guides < 1:
            return None
        try:
            plan = plan_tiles((frames - guides, height, width), self.settings.tiling.axes, VIDEO_AXES)
        except TilingError:  # the model call itself says why; the estimate falls back to ComfyUI's
            return None
        f, h, w = largest_tile(plan)
        tile_video = channels * f * h * w
        tile_input = channels * (f + guides) * h * w
        sum_size = exact_sum_dtype(getattr(self.model, "device", None)).itemsize
        accumulator = (math.prod(video) + (extras if self.settings.audio_mode == AUDIO_AVERAGE else 0)) * sum_size
        cut = (tile_input + (tile_input + extras if extras else 0)) * INPUT_ITEMSIZE
        weighted = 2 * tile_video * sum_size
        call_input = math.prod(video) + extras
        copy = call_input * INPUT_ITEMSIZE if self.other_devices else 0
        cached = call_input * inference_dtype(self.model).itemsize if self.step_cache else 0
        shape = [batch, channels, f + guides, h, w] if not extras else [batch, 1, tile_input + extras]
        return shape, batch * (accumulator + cut + weighted + copy + cached)

    def estimate_shape(self, noise_shape: Sequence[int], conds: dict) -> list[int]:
        """The noise shape for which ComfyUI's own estimate is this model's: the largest tile's, its last axis
        lengthened to count the pack's buffers (both are linear in the batch, so batch 2 stays right)."""
        layout = self.layout(noise_shape, max((_guide_tokens([c.get("keyframe_idxs")]) for cs in conds.values()
                                               for c in cs if isinstance(c, dict)), default=0))
        if layout is None:
            return list(noise_shape)
        shape, extra = layout
        tile = self._estimate(shape, {})
        if tile <= 0:
            return shape
        return shape[:-1] + [shape[-1] + math.ceil(extra * shape[-1] / tile)]

    def _estimate(self, shape: Sequence[int], cond_shapes: dict, **kwargs: Any) -> float:
        """ComfyUI's own estimate (the model class's formula, not this object patch) for `shape`, with those of
        `kwargs` the formula takes."""
        formula = type(self.model).memory_required
        return formula(self.model, list(shape), cond_shapes=cond_shapes, **_accepted(formula, kwargs))

    # -- the wrappers -------------------------------------------------------------------------------------
    def prepare_sampling(self, executor, model, noise_shape, conds, *args, **kwargs):
        """PREPARE_SAMPLING: ComfyUI estimates for `estimate_shape`, unless this object patch already answers;
        notes whether `model` has MultiGPU clones or a step cache (until the run ends, `outer_sample`)."""
        clones = getattr(model, "get_additional_models_with_key", None)
        self.other_devices = bool(clones("multigpu")) if clones is not None else False
        self.step_cache = bool(step_cache_wrappers({"wrappers": getattr(model, "wrappers", None) or {}}))
        if getattr(model.model, "memory_required", None) is not self:
            noise_shape = self.estimate_shape(noise_shape, conds)
        return executor(model, noise_shape, conds, *args, **kwargs)

    def outer_sample(self, executor, *args, **kwargs):
        """OUTER_SAMPLE: this run's latent shapes (`latent_shapes`, else the latent's), known while it runs."""
        latent = kwargs.get("latent_image", args[1] if len(args) > 1 else None)
        shapes = kwargs.get("latent_shapes") or ([latent.shape] if latent is not None else [])
        self.latent_shapes = [tuple(int(v) for v in s) for s in shapes]
        try:
            return executor(*args, **kwargs)
        finally:
            self.latent_shapes = None
            self.other_devices = self.step_cache = False


def _accepted(function: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords of `kwargs` that `function` takes (all of them where it has **kwargs)."""
    if not kwargs:
        return kwargs
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return kwargs
    names = {p.name for p in parameters if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                       inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    return {k: v for k, v in kwargs.items() if k in names}


def _guide_tokens(keyframe_idxs: Any) -> int:
    """Guide tokens named by `keyframe_idxs` (tensors or their sizes, (batch, 3, tokens[, 2])), the most of any."""
    shapes = [tuple(k.shape) if hasattr(k, "shape") else tuple(k) for k in keyframe_idxs if k is not None]
    return max((int(s[2]) for s in shapes if len(s) > 2), default=0)


def register_tile_memory(model_patcher: Any, settings: TDPSettings) -> None:
    """Make ComfyUI size every run of `model_patcher` (a TDP clone) by its largest tile (module docstring);
    replaces an earlier registration."""
    import comfy.patcher_extension as ext

    memory = TileMemory(settings, model_patcher.model)
    for kind in (ext.WrappersMP.PREPARE_SAMPLING, ext.WrappersMP.OUTER_SAMPLE):
        model_patcher.remove_wrappers_with_key(kind, MEMORY_KEY)
    model_patcher.add_wrapper_with_key(ext.WrappersMP.PREPARE_SAMPLING, MEMORY_KEY, memory.prepare_sampling)
    model_patcher.add_wrapper_with_key(ext.WrappersMP.OUTER_SAMPLE, MEMORY_KEY, memory.outer_sample)
    model_patcher.add_object_patch("memory_required", memory)
