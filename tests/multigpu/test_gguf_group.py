"""A GGUF model (city96's ComfyUI-GGUF, imported by path; tiny LTXV in Q8_0 and Q4_0, ltx_tdp_devkit.tiny_gguf)
over a 2-rank gloo group equals one process bit for bit, with and without a LoRA-like patch: rank 0 sends each
quantized layer's weight as that layer dequantizes it (its LoRA applied, in the compute dtype, ltx.replica), the
workers build ComfyUI's own layers (ComfyUI-GGUF is not loaded there) and compute with it.

No hardware is mocked: the ranks are real worker processes on the CPU.
"""

from __future__ import annotations

import logging

import pytest
import torch

from ltx_tdp_devkit import tiny_gguf
from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2

pytestmark = pytest.mark.distributed

log = logging.getLogger(__name__)


def _cond(seed: int) -> list:
    ctx = randn(1, 8, tiny_gguf.CAPTION_CHANNELS, seed=seed)
    return [[ctx, {"attention_mask": torch.ones(1, 8, dtype=torch.long), "frame_rate": 25.0}]]


@pytest.fixture(scope="module")
def gguf(comfy):
    return tiny_gguf.gguf_loader(comfy)


@pytest.mark.parametrize("qtype", tiny_gguf.QTYPES)
@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_a_gguf_model_over_2_ranks_equals_one_process_bit_for_bit(comfy, gguf, group_factory, qtype, lora):
    group = group_factory(2)
    model = gguf(qtype)
    assert tiny_gguf.ggml_layers(model.model), f"{qtype}: the model holds no GGML-quantized layer"
    model = tiny_gguf.with_lora(model) if lora else model
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=4)}
    kw = dict(positive=_cond(1), negative=_cond(2))
    single = ksample(comfy, tdp_2x2(model), latent, **kw)
    multi = ksample(comfy, tdp_2x2(model, group), latent, **kw)
    assert torch.isfinite(multi).all()
    err = (multi - single).abs().max().item()
    log.info("GGUF %s%s group vs one process: %.3e", qtype, " + LoRA" if lora else "", err)
    assert err == 0.0, f"{qtype}{' + LoRA' if lora else ''}: 2 ranks differ from one process by {err:.3e}"
    if lora:
        unpatched = ksample(comfy, tdp_2x2(gguf(qtype), group), latent, **kw)
        effect = (multi - unpatched).abs().max().item()
        log.info("GGUF %s group: LoRA effect %.3e", qtype, effect)
        assert effect > 1e-3, f"{qtype}: the LoRA changed the 2-rank result by only {effect:.3e}"
