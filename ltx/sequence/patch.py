"""Turn an LTX MODEL into a sequence-parallel one (`apply_sequence_parallel`): wrappers on a clone, nothing global.

* CALC_COND_BATCH wrapper: the tile path's (`ltx.model.devices.calc_cond_batch_wrapper`): with ComfyUI's
  MultiGPU clones, a step's conds go to this device as one call that carries the devices (DEVICES_KEY).
* APPLY_MODEL wrapper (`SequenceModelWrapper`): a call that carries the devices runs sequence-parallel on them
  (`ltx.sequence.run.SequenceCall`), a step cache (EasyCache) once around it on the whole frame
  (`ltx.model.step_cache`); any other call runs unchanged.

With one device, without MultiGPU clones (or on a ComfyUI without core MultiGPU), every call runs unchanged and
the log says so once. TDP (the tile path, for stage 2) and this node do not go on the same MODEL.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ..comfy_internals import SEQUENCE, require
from ..errors import UnsupportedInput
from ..loader_factory import ensure_loader_factory
from ..model.devices import DEVICES_KEY, calc_cond_batch_wrapper
from ..model.facts import ltx_diffusion_model
from ..model.patch import SEQUENCE_KEY, WRAPPER_KEY, has_wrapper
from ..model.units import CallInputs
from ..model.step_cache import per_tile_wrappers, run_with_step_cache
from .attention import layers_with_own_attention
from .run import SequenceCall

log = logging.getLogger(__name__)

_said: set[str] = set()
_layouts: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
"""The layout last logged per sampling run (ComfyUI makes a MultiGPU thread pool per run)."""


def has_sequence_parallel(model_patcher: Any) -> bool:
    """Whether `model_patcher` carries this node's wrappers."""
    return has_wrapper(model_patcher, SEQUENCE_KEY)


def _say_once(key: str, text: str) -> None:
    if key not in _said:
        _said.add(key)
        log.info(text)


class SequenceModelWrapper:
    """The APPLY_MODEL wrapper."""

    def __call__(self, executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
        devices = transformer_options.get(DEVICES_KEY)
        if devices is None:
            _say_once("one", "LTX Sequence Parallel: this model has no MultiGPU clones (one device, or no MultiGPU "
                      "CFG Split on it): model calls run on one device, unchanged")
            return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kwargs)
        options = {k: v for k, v in transformer_options.items() if k != DEVICES_KEY}
        pool = devices.pool
        if pool is None or any(d not in getattr(pool, "devices", ()) for d in devices.devices[1:]):
            _say_once("pool", "LTX Sequence Parallel: ComfyUI gave this step no MultiGPU thread pool for every device, "
                      "so the devices cannot run at once: model calls run on one device, unchanged")
            return executor(x, t, c_concat, c_crossattn, control, options, **kwargs)
        if c_concat is not None:
            raise UnsupportedInput("LTX Sequence Parallel cannot shard concat conditioning (c_concat); LTX models "
                                   "do not use it")
        per_tile_wrappers(transformer_options, "shard")

        def sharded(options: dict[str, Any]) -> Any:
            call = SequenceCall(devices, executor, CallInputs(x, t, c_crossattn, kwargs), control, options)
            if _layouts.get(pool) != call.describe():  # once per sampling run, and again when the layout changes
                _layouts[pool] = call.describe()
                log.info("LTX Sequence Parallel: model calls run with %s", call.describe())
            return call.run()

        return run_with_step_cache(executor, x, t, c_crossattn, transformer_options, kwargs, sharded)


def apply_sequence_parallel(model_patcher: Any) -> Any:
    """A clone of `model_patcher` whose model calls run sequence-parallel over its MultiGPU clones' devices, with
    the result one device gives within fp32 rounding (docs/sequence-parallel.md); the input MODEL is untouched.

    Raises UnsupportedInput for a MODEL that is not LTX, or one the TDP patcher patched (TDP is for stage 2)."""
    import comfy.patcher_extension as ext

    require(SEQUENCE)
    own = layers_with_own_attention(ltx_diffusion_model(model_patcher))
    if own:
        raise UnsupportedInput(f"LTX Sequence Parallel cannot run this model: {len(own)} of its attention layers "
                               f"({own[0]}, ...) have their own attention function from the checkpoint, and "
                               "ComfyUI runs its default attention in their place whenever an attention override "
                               "is set, the sequence-parallel one included, so the shards would not compute what "
                               "one GPU computes. Run stage 1 on one GPU, or use a checkpoint without it.")
    if has_wrapper(model_patcher, WRAPPER_KEY):
        raise UnsupportedInput("LTX Sequence Parallel and the LTX TDP Model Patcher cannot go on the same MODEL: "
                               "sequence parallelism is for stage 1 (the whole video at low resolution), TDP for "
                               "stage 2 (the upscale). Put this node on the stage-1 model only.")
    m = model_patcher.clone()
    ensure_loader_factory(m)  # MultiGPU can copy a GGUF model too (ltx.loader_factory)
    for kind in (ext.WrappersMP.APPLY_MODEL, ext.WrappersMP.CALC_COND_BATCH):
        m.remove_wrappers_with_key(kind, SEQUENCE_KEY)
    m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, SEQUENCE_KEY, SequenceModelWrapper())
    m.add_wrapper_with_key(ext.WrappersMP.CALC_COND_BATCH, SEQUENCE_KEY, calc_cond_batch_wrapper)
    return m
