"""Rank 0's model call over a group: the TileRunner the TDP patcher hands every model call to.

Per call: (once per model / patch change) NEW_MODEL with the weights as ComfyUI patched them; then CALL
with the call's tensors; rank 0 runs its own tiles through the rest of ComfyUI's wrapper chain
(`run_tile`), the workers run theirs on their replicas; one all_reduce(SUM) of the flat fp32 buffer
gives the blend, and `call.finish` turns it into the model output. Progress is reported on rank 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from ..ltx.model_call import TiledModelCall, pack_latents
from ..ltx.patch import WRAPPER_KEY, TileProgress, check_interrupt, output_dtype, run_tiles_here
from ..tiling import TilingError
from . import protocol as P
from .replica import broadcast_buckets, model_config_bytes, model_key, patched_weights, plan_buckets
from .session import Session

log = logging.getLogger(__name__)

_PLAIN = (type(None), bool, int, float, str, bytes, torch.Tensor, torch.dtype, torch.device, torch.Size)
_SILENT = {"wrappers", "callbacks"}
_warned: set[str] = set()


def _is_plain(value: Any) -> bool:
    import enum
    import uuid

    if isinstance(value, _PLAIN + (uuid.UUID, enum.Enum)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_is_plain(k) and _is_plain(v) for k, v in value.items())
    return False


def _warn_once(key: str, text: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(text, *args)


def worker_options(transformer_options: dict[str, Any]) -> dict[str, Any]:
    """The part of `transformer_options` that travels to the workers: plain data only.

    Callables (other packs' attention patches, block replacements, wrappers) cannot run on a worker;
    non-empty ones are named in a warning, since rank 0's tiles would then differ from the workers'.
    """
    out = {}
    for key, value in transformer_options.items():
        if _is_plain(value):
            out[key] = value
        elif key == "wrappers":
            others = sorted({k for by_key in value.values() for k in by_key if k != WRAPPER_KEY and by_key[k]})
            if others:
                _warn_once(f"wrappers:{others}", "LTX TDP: model wrappers %s run on rank 0's tiles only; the worker "
                           "ranks run the plain model", ", ".join(others))
        elif key not in _SILENT and value:
            _warn_once(f"opt:{key}", "LTX TDP: transformer option %r (patches from another node) is not sent to the "
                       "worker ranks; their tiles run without it", key)
    return out


def send_model(session: Session, patcher: Any) -> None:
    """NEW_MODEL: the construction config and the patched weights, unless the workers hold them already."""
    key = model_key(patcher)
    if key == session.model_key:
        return
    others = sorted(k for k in getattr(patcher, "object_patches", {}) if k != "diffusion_model.patchifier")
    if others:
        _warn_once(f"obj:{others}", "LTX TDP: object patches %s are not replicated to the worker ranks", ", ".join(others))
    config = model_config_bytes(patcher)
    sd = patcher.model.state_dict()
    entries, sizes = plan_buckets(list(sd.items()))
    del sd
    seq = session.post(lambda seq: P.ModelMessage(seq, key, config, entries, sizes))
    weights = patched_weights(patcher)
    log.info("LTX TDP: sending the model to %d worker rank(s): %.1f MiB in %d broadcast(s)", len(session.workers),
             sum(sizes) / 2**20, len(sizes))
    broadcast_buckets(session, entries, sizes, weights, "while sending the model")
    session.wait_acks(seq, "while the workers loaded the model")
    session.done()
    session.model_key = key


def model_call(session: Session, patcher: Any, call: TiledModelCall, run_tile: Callable, ctx: dict[str, Any]) -> torch.Tensor:
    """One model call over the group; returns what the model returns (the blended x0)."""
    import comfy.model_management as mm

    if ctx.get("control") is not None:
        raise TilingError("multi-GPU TDP cannot send ControlNet inputs to the worker ranks; LTX models do not use them")
    send_model(session, patcher)
    stats, clock = session.stats, time.perf_counter()
    x = pack_latents([call.video, *call.extras]) if call.packed else call.video
    tree = {"x": x, "t": ctx["t"], "c_crossattn": ctx["c_crossattn"], "kwargs": call.kwargs,
            "transformer_options": worker_options(ctx["transformer_options"])}
    tensors: list[torch.Tensor] = []
    skeleton = P.split_tensors(tree, tensors)
    outbox = P.Outbox.of(tensors)
    seq = session.post(lambda seq: P.CallMessage(seq, session.model_key, call.settings, call.geometry, skeleton,
                                                 outbox.specs, outbox.nbytes))
    if outbox.nbytes:
        session.broadcast(outbox.buffer(session.comm_device), f"while sending model call {seq}")
    clock = _lap(stats, "send", clock)
    n_tiles, world = len(call.tiles), session.world
    progress = TileProgress(n_tiles, ctx["transformer_options"])
    failure: BaseException | None = None
    try:
        flat = call.partial(run_tile, 0, world, before_tile=check_interrupt,
                            on_tile=lambda done, total, tile: progress.tile_done(min(done * world, n_tiles), n_tiles, tile))
    except BaseException as e:  # interrupt (a BaseException in newer ComfyUI) or an error: keep step, then raise
        failure = e
        session.stop_call(seq)
        flat = torch.zeros(call.buffer_numel(), dtype=torch.float32, device=call.video.device)
    clock = _lap(stats, "tiles", clock)

    def on_wait(s: int) -> None:
        if failure is None and mm.processing_interrupted():
            session.stop_call(s)

    session.wait_acks(seq, f"during model call {seq}", on_wait)
    clock = _lap(stats, "wait", clock)
    flat = session.all_reduce(flat, f"during model call {seq}")
    session.done()
    _lap(stats, "reduce", clock)
    stats["calls"] += 1
    stats["send_bytes"] += outbox.nbytes
    stats["reduce_bytes"] += flat.numel() * flat.element_size()
    if failure is not None:
        raise failure
    mm.throw_exception_if_processing_interrupted()
    progress.tile_done(n_tiles, n_tiles, None)
    return call.finish(flat, output_dtype(call.video))


def _lap(stats: Any, phase: str, since: float) -> float:
    now = time.perf_counter()
    stats[phase] += now - since
    return now


class ModelRunner:
    """The TileRunner of one TDP-patched MODEL: every call goes to the group's live session.

    The weights sent are those of the patcher ComfyUI is sampling with (`model.current_patcher`, a clone
    that may carry LoRAs added after the TDP patcher), else the patcher the runner was made for.
    """

    def __init__(self, group: Any, model_patcher: Any):
        self.group = group
        self.model_patcher = model_patcher

    def __call__(self, call: TiledModelCall, run_tile: Callable, ctx: dict[str, Any]) -> torch.Tensor:
        active = getattr(self.model_patcher.model, "current_patcher", None) or self.model_patcher
        session = self.group.session()
        with session.lock:
            if session.world == 1:
                return run_tiles_here(call, run_tile, ctx["transformer_options"])
            with session.exchange("a model call"):
                return model_call(session, active, call, run_tile, ctx)
