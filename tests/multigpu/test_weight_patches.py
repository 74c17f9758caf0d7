"""Weights reach the workers as ComfyUI patched them: a patch added after the first run is sent again."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.ltx_helpers import call_model, ksample, randn, tdp_2x2

pytestmark = pytest.mark.distributed

PATCHED_KEY = "diffusion_model.transformer_blocks.0.ff.net.0.proj.weight"



def _with_diff_patch(model):
    """A clone with a LoRA-like weight difference on one feed-forward weight (ComfyUI's own "diff" patch)."""
    weight = model.model.state_dict()[PATCHED_KEY]
    patched = model.clone()
    patched.add_patches({PATCHED_KEY: (randn(*weight.shape, seed=9) * 0.5,)}, 1.0)
    return patched


def test_a_weight_patch_after_the_first_run_reaches_the_workers(ltxv, group_factory):
    group = group_factory(2)
    x = randn(1, 128, 2, 8, 8, seed=3)
    plain = call_model(tdp_2x2(ltxv, group), x, 0.6)
    patched_model = _with_diff_patch(ltxv)
    single = call_model(tdp_2x2(patched_model), x, 0.6)
    multi = call_model(tdp_2x2(patched_model, group), x, 0.6)
    changed = (multi - plain).abs().max().item()
    assert changed > 1e-3, f"the patch changed the 2-rank result by only {changed:.3e}"
    err = (multi - single).abs().max().item()
    assert err <= 1e-6, f"patched model: 2 ranks differ from single-process by {err:.3e} (limit 1e-6)"
    back = call_model(tdp_2x2(ltxv, group), x, 0.6)
    err_back = (back - plain).abs().max().item()
    assert err_back <= 1e-6, f"unpatched again: differs from the first run by {err_back:.3e}"


def test_a_patch_on_the_sampled_clone_reaches_the_workers_in_ksampler(comfy, ltxv, group_factory):
    """The patch is added to the TDP-patched MODEL (as a LoRA loader after the patcher would): the runner
    sends the weights of the patcher ComfyUI samples with."""
    group = group_factory(2)
    latent = {"samples": randn(1, 128, 2, 8, 8, seed=4)}
    single = ksample(comfy, _with_diff_patch(tdp_2x2(ltxv)), latent)
    multi = ksample(comfy, _with_diff_patch(tdp_2x2(ltxv, group)), latent)
    unpatched = ksample(comfy, tdp_2x2(ltxv, group), latent)
    err = (multi - single).abs().max().item()
    assert err <= 1e-5, f"KSampler with a patch after TDP: 2 ranks differ by {err:.3e} (limit 1e-5)"
    assert (multi - unpatched).abs().max().item() > 1e-3, "the patch did not change the 2-rank result"
