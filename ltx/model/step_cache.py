"""Step caches around a call the pack splits: the cache decides and reuses once per model call, on the whole frame.

A step cache (ComfyUI's EasyCache) is a DIFFUSION_MODEL wrapper: at each diffusion-model call it compares the
input with the last one and either runs the model or returns the input plus the residual (output - input) it
kept from the last call it ran. The pack makes several diffusion-model calls per model call, one per tile
(ltx.model.call) or per shard (ltx.sequence): left there, the cache would compare a tile with another tile and
add one tile's residual to another, a silently different picture. `run_with_step_cache` lifts such wrappers out
of the per-tile calls and runs them once around the whole split call, with the whole frame's input and output,
exactly where ComfyUI runs them on an unsplit model, so the cache makes the decisions it makes on the whole frame.

Assumptions about the cache, all in this module (ComfyUI 0.3.75 to 0.33, comfy_extras/nodes_easycache.py):

* it is registered as a DIFFUSION_MODEL wrapper under a key of STEP_CACHE_KEYS, read from
  `transformer_options["wrappers"]["diffusion_model"]` at call time;
* it reads the diffusion model's input as `args[0]` (LTX-2: the list [video, audio]) and its options where LTX's
  forward passes them (the sixth positional argument); what it returns is the diffusion model's output, in the same layout;
* when it runs the model it returns the inner call's output object itself; when it skips it returns anything
  else (EasyCache: the input, with the residual added in place).

LazyCache is a PREDICT_NOISE wrapper: it already runs once per sampler step, around the whole frame, and needs
nothing here. A DIFFUSION_MODEL wrapper under any other key keeps running once per tile (`per_tile_wrappers`
names them in a warning).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from .facts import inference_dtype

log = logging.getLogger(__name__)

STEP_CACHE_KEYS = ("easycache",)
"""Keys of the DIFFUSION_MODEL wrappers that are step caches (ComfyUI's EasyCache node: "easycache")."""
DIFFUSION_MODEL = "diffusion_model"
"""comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL (a str enum in every ComfyUI with wrappers)."""
_warned: set[tuple[str, ...]] = set()


def _diffusion_wrappers(transformer_options: dict[str, Any]) -> dict[str, list]:
    return (transformer_options.get("wrappers") or {}).get(DIFFUSION_MODEL) or {}


def step_cache_wrappers(transformer_options: dict[str, Any]) -> list[Callable]:
    """The step-cache wrappers a model call carries, outermost first (empty: no step cache)."""
    wrappers = _diffusion_wrappers(transformer_options)
    return [w for key in STEP_CACHE_KEYS for w in wrappers.get(key, ())]


def without_step_caches(transformer_options: dict[str, Any]) -> dict[str, Any]:
    """A copy of `transformer_options` whose diffusion-model calls run no step cache; `transformer_options`, its
    wrappers dict and the wrapper lists themselves are left untouched."""
    wrappers = dict(transformer_options.get("wrappers") or {})
    wrappers[DIFFUSION_MODEL] = {k: v for k, v in _diffusion_wrappers(transformer_options).items()
                                 if k not in STEP_CACHE_KEYS}
    return {**transformer_options, "wrappers": wrappers}


def per_tile_wrappers(transformer_options: dict[str, Any], what: str) -> None:
    """Warn once per set of keys that DIFFUSION_MODEL wrappers other than the known step caches run once per
    `what` (tile, shard): correct for a wrapper that treats every call on its own, not for another step cache."""
    keys = tuple(sorted(k for k, v in _diffusion_wrappers(transformer_options).items()
                        if v and k not in STEP_CACHE_KEYS))
    if keys and keys not in _warned:
        _warned.add(keys)
        log.warning("LTX TDP: the diffusion-model wrappers %s run once per %s. A step cache among them (one that "
                    "reuses the last call's output) would mix %ss; use ComfyUI's EasyCache or LazyCache, which the "
                    "pack runs once per step on the whole frame.", ", ".join(keys), what, what)


def model_output_from_denoised(model_sampling: Any, sigma: torch.Tensor, x: torch.Tensor,
                               denoised: torch.Tensor) -> torch.Tensor:
    """The diffusion-model output whose denoised value (`model_sampling.calculate_denoised`) is `denoised`, in x's
    dtype (at least fp32), 0 where no output gives it.

    Every ComfyUI model sampling (EPS, V, CONST) computes denoised = alpha * x + beta + b * output with alpha, beta
    and b set by sigma alone; they are read off one value per batch item, so inverting costs two passes over the
    latent (subtract, scale) where alpha is 1 and beta 0, as for LTX's CONST (measured: 5 ms at 1.2 M values on
    one CPU thread, against 12 ms for the inversion on whole tensors)."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    cell = torch.zeros((x.shape[0],) + (1,) * (x.ndim - 1), dtype=dtype, device=x.device)
    beta = model_sampling.calculate_denoised(sigma, cell, cell)
    alpha = model_sampling.calculate_denoised(sigma, cell, cell + 1) - beta
    b = model_sampling.calculate_denoised(sigma, cell + 1, cell) - beta
    x, denoised = x.to(dtype), denoised.to(dtype)
    if bool((alpha == 1).all()) and bool((beta == 0).all()):
        out = denoised - x
    else:
        out = denoised - beta - alpha * x
    solvable = b != 0
    out.mul_(torch.where(solvable, 1 / torch.where(solvable, b, torch.ones_like(b)), torch.zeros_like(b)))
    return out


def run_with_step_cache(executor: Any, x: torch.Tensor, t: torch.Tensor, c_crossattn: Any,
                        transformer_options: dict[str, Any], kwargs: dict[str, Any],
                        run_whole: Callable[[dict[str, Any]], torch.Tensor]) -> torch.Tensor:
    """The denoised output of an APPLY_MODEL call (`executor`'s arguments) that `run_whole(options)` computes split
    (tiles, shards), with the call's step caches run once around it, on the whole frame.

    Without a step cache: `run_whole(transformer_options)`, unchanged. With one: the cache sees the input and the
    output the diffusion model gets and gives on an unsplit call (ComfyUI's `_apply_model`: the sampling's
    `calculate_input`, cast to the inference dtype, LTX-2's latents unpacked) and `run_whole` runs without it.
    A step the cache runs returns `run_whole`'s result bit for bit; a step it skips returns the denoised value of
    what the cache gives, computed as ComfyUI computes it (`calculate_denoised` against the input `x`)."""
    caches = step_cache_wrappers(transformer_options)
    if not caches:
        return run_whole(transformer_options)
    import comfy.patcher_extension
    import comfy.utils

    inner_options = without_step_caches(transformer_options)
    model = executor.class_obj
    sampling = model.model_sampling
    xc = sampling.calculate_input(t, x).to(inference_dtype(model))
    shapes = kwargs.get("latent_shapes")
    model_input = comfy.utils.unpack_latents(xc, shapes) if shapes is not None else xc
    ran: list[tuple[Any, torch.Tensor]] = []

    def whole_frame(*_args: Any, **_kwargs: Any) -> Any:
        denoised = run_whole(inner_options)
        output = model_output_from_denoised(sampling, t, x, denoised).to(xc.dtype)
        output = comfy.utils.unpack_latents(output, shapes) if shapes is not None else output
        ran.append((output, denoised))
        return output

    timestep = sampling.timestep(t).float()
    # the positions of LTX's diffusion-model forward: x, timestep, context, attention_mask, frame_rate,
    # transformer_options, keyframe_idxs
    out = comfy.patcher_extension.WrapperExecutor.new_executor(whole_frame, caches).execute(
        model_input, timestep, c_crossattn, None, kwargs.get("frame_rate"), dict(transformer_options), None)
    if ran and out is ran[-1][0]:
        return ran[-1][1]
    if not torch.is_tensor(out):
        out, _ = comfy.utils.pack_latents(out)
    return sampling.calculate_denoised(t, out.float(), x)
