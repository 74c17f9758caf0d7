"""One model call as another rank receives it: plain inputs, no ComfyUI callables; and the model's replica.

A group (multigpu) sends a `ModelJob` to its worker ranks; each rebuilds the same `TiledModelCall` and runs
its share of the tiles with `run` on its own replica of the model (built from a `ModelRecipe`). Callables
in `transformer_options` (other packs' wrappers, attention patches, block replacements) cannot travel: they
run on rank 0's tiles only, and non-empty ones are named in a warning once.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from ...multigpu.api import Replica
from ...tiling import LatentGeometry
from ..errors import UnsupportedInput
from ...tiling.ranks import BeforeTile, TileRanks
from ..replica import PatcherReplica
from .call import TDPSettings, TiledModelCall
from .keyframes import MASK_ATTRIBUTE, has_marker_mask, marker_mask_patch
from .positions import ShiftedGridPatchifier

log = logging.getLogger(__name__)

_PLAIN = (type(None), bool, int, float, str, bytes, torch.Tensor, torch.dtype, torch.device, torch.Size,
          uuid.UUID, enum.Enum)
_SILENT = {"wrappers", "callbacks", "easycache"}
"""Options left out without a warning: wrappers and callbacks (the per-tile ones are named by `_PER_TILE_WRAPPERS`
below), and the step-cache state of EasyCache/LazyCache, used on rank 0 around the whole call (ltx.model.step_cache)."""
_PER_TILE_WRAPPERS = ("apply_model", "diffusion_model")
"""The wrapper kinds (comfy.patcher_extension.WrappersMP values) that run inside a model call, so per tile; the
others (outer_sample, prepare_sampling, ...) run once around the sampling, on rank 0, as without a group."""
_warned: set[str] = set()


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
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


def plain_options(transformer_options: dict[str, Any], own_wrapper: str) -> dict[str, Any]:
    """The part of `transformer_options` that can run on another rank: plain data only."""
    out = {}
    for key, value in transformer_options.items():
        if _is_plain(value):
            out[key] = value
        elif key == "wrappers":
            others = sorted({k for kind, by_key in value.items() if kind in _PER_TILE_WRAPPERS for k in by_key
                             if k != own_wrapper and by_key[k]})
            if others:
                _warn_once(f"wrappers:{others}", "LTX TDP: model wrappers %s run on rank 0's tiles only; the worker "
                           "ranks run the plain model", ", ".join(others))
        elif key not in _SILENT and value:
            _warn_once(f"opt:{key}", "LTX TDP: transformer option %r (patches from another node) is not sent to the "
                       "worker ranks; their tiles run without it", key)
    return out


@dataclass(frozen=True)
class ModelJob:
    """Everything a rank needs to run its tiles of one model call; `numel` and `dtype` are the flat partial
    sum's length and dtype (rank 0's `TiledModelCall.sum_dtype`: every rank sums in it)."""

    settings: TDPSettings
    geometry: LatentGeometry
    x: torch.Tensor
    t: torch.Tensor
    c_crossattn: Any
    kwargs: dict[str, Any]
    transformer_options: dict[str, Any]
    numel: int
    dtype: torch.dtype = torch.float32

    @classmethod
    def of(cls, call: TiledModelCall, x: torch.Tensor, t: torch.Tensor, c_crossattn: Any, control: Any,
           transformer_options: dict[str, Any], own_wrapper: str) -> "ModelJob":
        if control is not None:
            raise UnsupportedInput("multi-GPU TDP cannot send ControlNet inputs to the worker ranks; LTX models do not "
                              "use them")
        return cls(call.settings, call.geometry, x, t, c_crossattn, call.kwargs,
                   plain_options(transformer_options, own_wrapper), call.buffer_numel(), call.sum_dtype)

    def run(self, model: Any, rank: int, world: int, before_tile: BeforeTile) -> torch.Tensor:
        """This rank's flat partial sum, computed with `model` (a ComfyUI BaseModel replica on this rank)."""
        call = TiledModelCall(self.settings, self.geometry, self.x, self.kwargs, self.dtype)

        def run_tile(x: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
            return model.apply_model(x, self.t, c_concat=None, c_crossattn=self.c_crossattn, control=None,
                                     transformer_options=self.transformer_options, **kw)

        return call.partial(run_tile, rank, world, before_tile=before_tile)


@dataclass(frozen=True)
class ModelRecipe:
    """A diffusion model's construction config: the class and attributes of its `model_config`.

    Not the object itself: newer ComfyUI gives model configs a `__getattr__` that answers None for anything
    missing, which breaks plain pickling (`__setstate__` comes back as None).
    """

    config_type: type
    attributes: dict[str, Any]

    @classmethod
    def of(cls, patcher: Any) -> "ModelRecipe":
        config = patcher.model.model_config
        return cls(type(config), dict(vars(config)))

    def build(self, device: torch.device) -> Replica:
        """The empty BaseModel (ComfyUI's own class, TDP's per-tile positions), its weights kept on `device`."""
        config = self.config_type.__new__(self.config_type)
        config.__dict__.update(self.attributes)
        model = config.get_model({}, "", device=device).to(device).eval()
        dm = model.diffusion_model
        if hasattr(dm, "patchifier") and not isinstance(dm.patchifier, ShiftedGridPatchifier):
            dm.patchifier = ShiftedGridPatchifier(dm.patchifier)  # what rank 0 applies as an object patch
        if has_marker_mask(dm):
            setattr(dm, MASK_ATTRIBUTE, marker_mask_patch(dm, {}))  # likewise (LTX-2.5)
        return Replica(model, model, device)


def model_ranks(group: Any, model_patcher: Any) -> TileRanks:
    """The ranks of `group` (a multigpu TDPGroup) that share the tiles of a TDP-patched MODEL's calls. The
    weights sent are those of the patcher ComfyUI samples with (`model.current_patcher`, a clone that may carry
    LoRAs added after the TDP patcher), else `model_patcher`."""
    return group.ranks("model", lambda: PatcherReplica(
        getattr(model_patcher.model, "current_patcher", None) or model_patcher, ModelRecipe.of))
