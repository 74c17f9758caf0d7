"""A ComfyUI ModelPatcher as a multi-GPU group replicates it (ltx.replica.PatcherReplica): the key
changes when the weights computed with change, and the weights sent are the ones ComfyUI computes with,
weight patches (LoRAs) applied, whether or not ComfyUI has applied them in place yet."""

from __future__ import annotations

import torch


def _patcher():
    import comfy.model_patcher

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    return comfy.model_patcher.ModelPatcher(module, load_device=torch.device("cpu"), offload_device=torch.device("cpu"))


def _source(patcher):
    from ltx_tdp.ltx.replica import PatcherReplica

    return PatcherReplica(patcher, lambda p: None)


def test_the_key_changes_with_weight_patches_and_in_place_edits_not_with_a_plain_clone(comfy):
    base = _patcher()
    key = _source(base).key()
    assert _source(base.clone()).key() == key, "a clone without new patches computes with the same weights"
    lora = base.clone()
    lora.add_patches({"0.weight": (torch.ones(8, 8),)}, 0.5)
    assert _source(lora).key() != key, "a weight patch (a LoRA) left the key unchanged"
    with torch.no_grad():
        base.model[1].bias += 1.0
    assert _source(base).key() != key, "weights changed in place left the key unchanged"


def test_the_weights_sent_are_those_comfyui_computes_with_before_and_after_it_patches_in_place(comfy):
    base = _patcher()
    original = {k: t.clone() for k, t in base.model.state_dict().items()}
    lora = base.clone()
    lora.add_patches({"0.weight": (torch.full((8, 8), 2.0),)}, 0.25)
    before = dict(_source(lora).weights())  # not applied yet: computed with comfy.lora
    lora.patch_model()  # ComfyUI applies the patch in place, keeping the original in `backup`
    try:
        applied = {k: t.clone() for k, t in lora.model.state_dict().items()}
        after = dict(_source(lora).weights())
        plain = dict(_source(base).weights())  # the unpatched clone, while the module holds the patched weights
    finally:
        lora.unpatch_model()
    assert torch.allclose(applied["0.weight"], original["0.weight"] + 0.5), "the patch is not the one expected"
    for key in original:
        assert torch.equal(before[key], applied[key]), f"{key}: computed before loading differs from ComfyUI's"
        assert torch.equal(after[key], applied[key]), f"{key}: read after loading differs from ComfyUI's"
        assert torch.equal(plain[key], original[key]), f"{key}: the unpatched clone sent the patched weight"
