"""The LTX Sequence Parallel node in a real ComfyUI (in process): without MultiGPU clones (one device, or ComfyUI
0.3.75 with no core MultiGPU) it changes nothing and says so once; with the TDP patcher on the same MODEL it is
refused, in either order, with a message naming the stages."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import ksample, load_ltxv, randn, tdp_2x2


def _node(comfy, model):
    from ltx_tdp.nodes.sequence_parallel import SequenceParallelNode

    (out,) = comfy.run_node(SequenceParallelNode, model=model)
    return out


def _latent() -> dict:
    return {"samples": randn(1, 128, 2, 6, 8, seed=4)}


def test_schema_is_the_fixed_interface(comfy):
    from ltx_tdp.nodes.sequence_parallel import SequenceParallelNode
    from ltx_tdp.nodes.types import CATEGORY

    schema = SequenceParallelNode.define_schema()
    assert (schema.node_id, schema.display_name, schema.category) == (
        "LTXTDPSequenceParallel", "LTX Sequence Parallel", CATEGORY)
    assert [i.id for i in schema.inputs] == ["model"] and schema.inputs[0].tooltip
    assert len(schema.outputs) == 1 and schema.outputs[0].tooltip


def test_without_multigpu_clones_the_model_is_unchanged_and_the_log_says_so_once(comfy, model_names, caplog):
    from ltx_tdp.ltx.sequence import patch

    ltxv = load_ltxv(comfy, model_names)
    plain = ksample(comfy, ltxv, _latent(), cfg=3.0)
    patch._said.clear()
    with caplog.at_level("INFO", logger="ltx_tdp"):
        out = ksample(comfy, _node(comfy, ltxv), _latent(), cfg=3.0)
    assert torch.equal(out, plain), f"one device: differs by {(out - plain).abs().max():.3e}"
    assert caplog.text.count("no MultiGPU clones") == 1, f"expected one log line saying so:\n{caplog.text}"


@pytest.mark.parametrize("order", ["tdp_then_sequence", "sequence_then_tdp"])
def test_tdp_on_the_same_model_is_refused(comfy, model_names, order):
    from ltx_tdp.ltx.errors import UnsupportedInput

    ltxv = load_ltxv(comfy, model_names)
    with pytest.raises(UnsupportedInput, match="cannot go on the same MODEL") as refused:
        if order == "tdp_then_sequence":
            _node(comfy, tdp_2x2(ltxv))
        else:
            tdp_2x2(_node(comfy, ltxv))
    assert "stage 1" in str(refused.value) and "stage 2" in str(refused.value), str(refused.value)


def test_a_model_that_is_not_ltx_is_refused(comfy):
    from ltx_tdp.ltx.errors import UnsupportedInput

    class NotLTX:
        model = None

    with pytest.raises(UnsupportedInput):
        _node(comfy, NotLTX())
