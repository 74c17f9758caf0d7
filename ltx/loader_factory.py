"""A loader factory for models whose loader registered none, so ComfyUI's MultiGPU can copy them to more devices.

ComfyUI's in-process MultiGPU (MultiGPU CFG Split, ComfyUI 0.24+) gives every extra device a copy of the model
built by the loader's own factory, `ModelPatcher.cached_patcher_init` (`deepclone_multigpu`); it refuses a model
without one ("cached_patcher_init is not initialized"). Core's loaders register a factory that reads the file
again. ComfyUI-GGUF's `Unet Loader (GGUF)` registers none, so a GGUF model could not use several GPUs.

The pack's nodes (`ensure_loader_factory`) give their clone a factory where it has none: `rebuild` makes a new
model of the same class and config, whose every weight is a new tensor object of the source weight's own class
(a quantized `GGMLTensor` stays one, with its type, shape and patch list) over the same storage. Nothing is read
again and nothing is copied in memory, and one device's load, moves and patches never reach another device's
copy. Core calls the factory after unloading the model and its clones, when the weights hold no patch (a LoRA is
applied by each device's own patcher at its load, as for core's loaders).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)


def _alias(tensor: torch.Tensor) -> torch.Tensor:
    """A new tensor object of `tensor`'s class over the same storage, with a copy of its Python attributes
    (lists copied, so a patch list set on one never shows on the other). Invariant: same class, same bytes at the
    same address, `result is not tensor`."""
    if type(tensor) in (torch.Tensor, torch.nn.Parameter):
        return tensor.detach()
    alias = torch.Tensor._make_subclass(type(tensor), tensor.as_subclass(torch.Tensor), False)
    for name, value in vars(tensor).items():
        setattr(alias, name, list(value) if isinstance(value, list) else value)
    return alias


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """name -> tensor of `module`'s parameters and persistent buffers, the objects themselves (not `state_dict`:
    ComfyUI-GGUF's layers write stand-ins there for its memory estimate)."""
    out: dict[str, torch.Tensor] = {}
    for owner_name, owner in module.named_modules():
        prefix = owner_name + "." if owner_name else ""
        for name, tensor in owner.named_parameters(recurse=False):
            out[prefix + name] = tensor
        for name, tensor in owner.named_buffers(recurse=False):
            if name not in owner._non_persistent_buffers_set:
                out[prefix + name] = tensor
    return out


def rebuild(source: Any, load_device: Any = None, offload_device: Any = None, **_options: Any) -> Any:
    """A ModelPatcher over a new model equal to `source` (a ComfyUI BaseModel): same class and model config,
    every diffusion-model weight aliased (`_alias`). `_options` takes what ComfyUI passes a
    factory (`disable_dynamic`). Invariant: the new diffusion model's state dict has the source's keys, each
    tensor of the same class over the same storage. Raises RuntimeError while the source's weights hold a patch
    (they are shared, so the copy would carry it twice) or where the rebuilt model does not take every weight."""
    import comfy.model_patcher

    if getattr(source, "current_weight_patches_uuid", None) is not None:
        raise RuntimeError(f"LTX TDP cannot copy this {type(source).__name__} to another device while its weights "
                           "are patched in place; run the prompt again (ComfyUI unloads the model first).")
    weights = {key: _alias(value) for key, value in _weights(source.diffusion_model).items()}
    model = source.model_config.get_model(weights, "")  # the config is read, never changed: both models share it
    if type(model) is not type(source):
        raise RuntimeError(f"LTX TDP rebuilt this model as {type(model).__name__}, not {type(source).__name__}, "
                           "so it cannot copy it to another device; load it with a core loader instead.")
    missing, unexpected = model.diffusion_model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"LTX TDP cannot copy this {type(source).__name__} to another device: its rebuilt model "
                           f"does not take the weights (missing {sorted(missing)[:3]}, unexpected "
                           f"{sorted(unexpected)[:3]}); load it with a core loader instead.")
    log.info("LTX TDP: rebuilt %s (%d weights shared) for another device", type(source).__name__, len(weights))
    return comfy.model_patcher.ModelPatcher(model, load_device=load_device, offload_device=offload_device)


def ensure_loader_factory(patcher: Any) -> None:
    """Give `patcher` (a clone the pack owns) the `rebuild` factory where its loader registered none (ComfyUI-
    GGUF's, other custom loaders); a loader's own factory is kept. Invariant: afterwards `patcher` and its clones
    can be copied to another device by ComfyUI's MultiGPU, with the weights the source holds."""
    if getattr(patcher, "cached_patcher_init", "absent") is not None:
        return
    patcher.cached_patcher_init = (rebuild, (patcher.model, patcher.load_device, patcher.offload_device))
