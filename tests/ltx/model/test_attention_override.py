"""An attention backend set before the TDP patcher (an `optimized_attention_override`, as Sage/Flash nodes and
core's ModelAttentionBackend set it) still runs at every attention call of every tile, and the result is the one
the model gives with it. The pack never replaces the override on the tile path."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.attention_probes import RecordingAttention
from ltx_tdp_devkit.ltx_helpers import ksample, load_ltxv, randn, tdp_2x2

TILES = 4
TILE_TOKENS = 3 * 5 * 6
"""2 x 2 tiles with overlap 2 of an 8 x 10 latent (3 frames): 5 x 6 cells each."""


def _sample(comfy, model, latent):
    """One KSampler step with cfg 1: one batched model call."""
    return ksample(comfy, model, latent, steps=1, cfg=1.0)


@pytest.fixture(scope="module")
def ltxv(comfy, model_names):
    return load_ltxv(comfy, model_names)


def test_an_override_set_before_the_patcher_runs_on_every_tile(comfy, ltxv):
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=3)}
    recorder = RecordingAttention()
    untiled = _sample(comfy, recorder.on(ltxv), latent)
    whole = recorder.take()
    if not whole:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()}'s LTXV does not call optimized_attention_override")
    plain = _sample(comfy, tdp_2x2(ltxv), latent)
    tiled = _sample(comfy, tdp_2x2(recorder.on(ltxv)), latent)
    calls = recorder.take()
    assert len(calls) == TILES * len(whole), f"{len(calls)} attention calls over {TILES} tiles, untiled {len(whole)}"
    self_attention = [c for c in calls if c[1] == c[0]]
    assert self_attention and all(c == (TILE_TOKENS, TILE_TOKENS) for c in self_attention), sorted(set(calls))
    assert torch.equal(tiled, plain), f"the override changed the TDP result by {(tiled - plain).abs().max():.3e}"
    assert not torch.equal(tiled, untiled)  # tiles, not the untiled call


def test_core_attention_backend_node_before_the_patcher_gives_the_same_result(comfy, ltxv):
    try:
        comfy.node_class("ModelAttentionBackend")
    except KeyError:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no ModelAttentionBackend node")
    (backend,) = comfy.run_node("ModelAttentionBackend", model=ltxv, attention="pytorch attention")
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=3)}
    assert torch.equal(_sample(comfy, tdp_2x2(backend), latent), _sample(comfy, tdp_2x2(ltxv), latent))
