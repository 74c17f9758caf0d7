"""A model whose attention layers carry their own attention function (newer ComfyUI: `comfy_attention`, an object
whose `function` is set from the checkpoint's metadata, e.g. int8 attention, passed as `preferred_attention=`;
ComfyUI runs any attention override in that function's place). Under LTX Sequence Parallel's override the shards
would compute with the default attention while one GPU computes with the layer's own, so the node refuses such a
model with a message, before sampling.

Stand-in for the newer ComfyUI: the attribute set on one attention layer of the tiny LTXV loaded by 0.33's own
UNETLoader (0.33's layers have none, which the last test pins).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ltx_tdp.ltx.errors import UnsupportedInput
from ltx_tdp.ltx.sequence.attention import PREFERRED, layers_with_own_attention
from ltx_tdp_devkit.ltx_helpers import load_ltxv
from ltx_tdp_devkit.sequence import sequence


@pytest.fixture
def fresh_ltxv(comfy, model_names):
    return load_ltxv(comfy, model_names)


def test_a_layer_with_its_own_attention_function_is_refused_with_a_message(fresh_ltxv):
    layer = fresh_ltxv.model.diffusion_model.transformer_blocks[0].attn1
    setattr(layer, PREFERRED, SimpleNamespace(function=lambda *args, **kwargs: None))
    with pytest.raises(UnsupportedInput, match="own attention function") as refused:
        sequence(fresh_ltxv)
    assert "transformer_blocks.0.attn1" in str(refused.value) and "\n" not in str(refused.value)


def test_a_layer_without_a_preference_is_not_refused(fresh_ltxv):
    layer = fresh_ltxv.model.diffusion_model.transformer_blocks[0].attn1
    setattr(layer, PREFERRED, SimpleNamespace(function=None))
    sequence(fresh_ltxv)


def test_this_comfyuis_ltx_layers_have_no_attention_function_of_their_own(fresh_ltxv):
    assert layers_with_own_attention(fresh_ltxv.model.diffusion_model) == []
