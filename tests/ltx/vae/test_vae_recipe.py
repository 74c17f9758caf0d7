"""A VAE's replica recipe builds a clean module on a worker: from its class and the constructor config ComfyUI keeps
on it (ComfyUI >= 0.2x), else (ComfyUI 0.3.x's VideoVAE keeps none) from its module tree without what ComfyUI's model
loaders put on it. Never the live module with rank 0's loader state.

Mocked: the state ComfyUI's Dynamic VRAM patcher (`ModelPatcherDynamic`, NVIDIA only) puts on a module it loads, as
attributes of the names it uses (`dynamic_vbars`, `dynamic_pins`, `_v`, `_pin_state`, `_v_weight`, ...): host
buffers and virtual allocations that cannot be pickled (stood for by a lock) and kept weight copies.
"""

from __future__ import annotations

import threading

import pytest
import torch

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.ltx_helpers import load_vae

KEPT_WEIGHT_BYTES = 4 * 2**20


def _with_dynamic_vram_state(module: torch.nn.Module) -> torch.nn.Module:
    """`module` as Dynamic VRAM leaves it after a load (the mock of the module docstring)."""
    module.dynamic_vbars = {torch.device("cuda", 0): threading.Lock()}
    module.dynamic_pins = {torch.device("cuda", 0): {"weights": (threading.Lock(), [], [-1])}}
    module.dynamic_patchers = {1}
    module.model_loaded_weight_memory, module.model_lowvram = 123, True
    for name, layer in module.named_modules():
        if getattr(layer, "weight", None) is not None:
            layer._v, layer._pin_state, layer.seed_key, layer._v_signature = threading.Lock(), {}, name, None
            layer.weight_lowvram_function, layer.comfy_cast_weights, layer.comfy_patched_weights = None, True, True
    first = next(m for m in module.modules() if getattr(m, "weight", None) is not None)
    first._v_weight = torch.zeros(KEPT_WEIGHT_BYTES // 4)
    return module


def _travel(vae):
    """The recipe as a worker gets it: pickled with its module's weights left out, unpickled, built."""
    from ltx_tdp.ltx.vae.job import VaeRecipe
    from ltx_tdp.multigpu import wire as W

    placeholders = frozenset(id(t) for t in vae.first_stage_model.state_dict(keep_vars=True).values())
    recipe = VaeRecipe.of(vae)
    data = W.dumps(recipe, placeholders)
    return recipe, len(data), W.loads(data).module.build()


def _loader_state(module: torch.nn.Module) -> list[str]:
    from ltx_tdp.ltx.vae.job import PATCHER_STATE

    return sorted({f"{name}.{key}" for name, m in module.named_modules() for key in vars(m) if key in PATCHER_STATE})


def _check_clean_copy(vae, recipe, size: int, built: torch.nn.Module) -> None:
    live = vae.first_stage_model
    assert type(built) is type(live), f"built a {type(built).__name__} for a {type(live).__name__}"
    want = {k: tuple(t.shape) for k, t in live.state_dict().items()}
    assert {k: tuple(t.shape) for k, t in built.state_dict().items()} == want, "the built module's weights differ"
    assert all(t.device.type == "meta" for t in built.state_dict().values() if t.numel() > 2), \
        "weights travelled inside the recipe instead of by broadcast"
    assert not _loader_state(built), f"loader state travelled: {_loader_state(built)[:5]}"
    assert size < KEPT_WEIGHT_BYTES, f"the recipe's pickle is {size} bytes: it carried a kept weight copy"
    assert not built.training, "the replica is not in eval mode"


def test_a_vae_with_dynamic_vram_state_travels_as_a_clean_module(comfy, model_names):
    from ltx_tdp.multigpu import wire as W

    vae = load_vae(model_names)  # its own: the state put on it below stays with it
    live = _with_dynamic_vram_state(vae.first_stage_model)
    with pytest.raises(TypeError):
        W.dumps(live, frozenset(id(t) for t in live.state_dict(keep_vars=True).values()))  # the live module
    recipe, size, built = _travel(vae)
    _check_clean_copy(vae, recipe, size, built)
    keeps_config = isinstance(getattr(live, "config", None), dict)
    assert (recipe.module.kind is not None) == keeps_config and (recipe.module.skeleton is None) == keeps_config, \
        f"config kept: {keeps_config}; recipe kind {recipe.module.kind}, skeleton {recipe.module.skeleton is not None}"


def test_a_vae_whose_module_keeps_no_config_travels_as_its_tree_without_loader_state(comfy):
    """ComfyUI 0.3.x's VideoVAE keeps no config: its module tree travels, stripped of what loaders put on it."""
    from ltx_tdp.ltx.vae.job import ModuleRecipe

    live = _with_dynamic_vram_state(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)))
    recipe = ModuleRecipe.of(live)
    assert recipe.kind is None and recipe.skeleton is not None, "a module without config took the config path"
    built = recipe.build()
    assert not _loader_state(built) and _loader_state(live), f"left on the copy: {_loader_state(built)}"
    assert torch.equal(built[0].weight, live[0].weight) and built[0] is not live[0], "the tree was not copied"


def test_the_diffusion_vae_travels_from_its_class_and_config(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    vae = dv.load(seed=1)
    recipe, size, built = _travel(vae)
    _check_clean_copy(vae, recipe, size, built)
    assert recipe.module.kind is not None, "LTX-2.5's VAE keeps its config: it must be built from it"
    steps = vae.first_stage_model.decoder.default_inference_timesteps
    assert torch.equal(built.decoder.default_inference_timesteps, steps), "a non-persistent buffer was lost"
