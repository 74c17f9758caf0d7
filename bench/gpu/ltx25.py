"""LTX-2.5's transformer at its published configuration, quantized as its checkpoints are (fp8 e4m3fn,
int8-convrot), through the pack on the device: one step per format.

Each step builds the model (random weights, nothing downloaded: bench/gpu/quantized.py), calls it once on a
stage-2 input unpatched, and then through the TDP patcher:

* locally: 1 x 1 tiles must return the unpatched x0 bit for bit; 2 x 2 tiles on the one GPU (time, peak);
* on a 2-rank group (both ranks on this GPU, gloo: the worker gets rank 0's quantized weights): 1 x 1 and
  1 x 2 tiles must return the local result bit for bit (each cell then sums one value per rank, and the
  worker runs the same layers on the same codes); 2 x 2 within GROUP_LIMIT (a cell covered by four tiles is
  summed per rank first, then across ranks: another order of fp32 additions).

Audio is averaged over the tile passes (`average`), so the whole packed x0, audio included, is compared.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from correctness import GROUP_LIMIT, relative
from models import call_inputs, model_call, tdp
from quantized import load_quantized_ltxav
from runtime import Records, attention_name, device, kitchen_backends, measure
from sizes import Layout, Sizes

AUDIO_MODE = "average"
GROUP_TIMEOUT_S = 120
"""The group's collective timeout: sending 20 B quantized weights over gloo takes tens of seconds."""


def ltx25_fp8(rec: Records, sizes: Sizes) -> None:
    """LTX-2.5 in fp8 e4m3fn (per-tensor scale), local and on a 2-rank group."""
    _run(rec, sizes, "fp8")


def ltx25_int8(rec: Records, sizes: Sizes) -> None:
    """LTX-2.5 in int8-convrot (the official templates' format), local and on a 2-rank group."""
    _run(rec, sizes, "int8")


def _diff(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape:
        return math.inf
    return (got.double() - want.double()).abs().max().item()


def _check(rec: Records, name: str, got: torch.Tensor, want: torch.Tensor, limit: float, detail: str,
           **extra: Any) -> None:
    """Record `got` against `want`: bit-identical when `limit` is 0, else max |diff| / max |want| <= limit."""
    equal = got.shape == want.shape and torch.equal(got, want)
    value = _diff(got, want) if limit == 0 else relative(got, want) if got.shape == want.shape else math.inf
    ok = equal if limit == 0 else value <= limit
    rec.add(name, "ok" if ok else "fail", value=value, limit=limit,
            detail=f"bit-identical: {equal}; {detail}", **extra)


def _timed(rec: Records, name: str, model: Any, inputs: Any, sigma: float, **extra: Any) -> torch.Tensor:
    out, seconds, peak = measure(lambda: model_call(model, inputs, sigma))
    rec.add(name, "ok", seconds=seconds, peak_gib=peak, finite=bool(torch.isfinite(out).all()), **extra)
    return out


def _run(rec: Records, sizes: Sizes, fmt: str) -> None:
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import resolve_settings

    (patcher, facts), seconds, peak = measure(
        lambda: load_quantized_ltxav(sizes.ltx25_transformer, fmt, sizes.convrot_group))
    f, h, w = sizes.ltx25_latent
    rec.add(f"build LTX-2.5 transformer ({fmt})", "ok", seconds=seconds, peak_gib=peak, attention=attention_name(),
            kitchen=kitchen_backends(),
            latent=[f, h, w], audio_latents=sizes.ltx25_audio_latents, text_tokens=sizes.ltx25_text_tokens,
            sigma=sizes.sigma, **facts)
    inputs = call_inputs(patcher, sizes.ltx25_latent, sizes.ltx25_audio_latents, sizes.ltx25_text_tokens, seed=21)
    where = f"{facts['format']}, compute {facts['compute_dtype']}; x0 {tuple(inputs.x.shape)} on {inputs.x.device}"
    want = _timed(rec, f"unpatched call ({fmt})", patcher, inputs, sizes.sigma, tokens=f * h * w)
    again = model_call(patcher, inputs, sizes.sigma)
    one = model_call(tdp(patcher, None, audio_mode=AUDIO_MODE), inputs, sizes.sigma)
    _check(rec, f"1x1 TDP == unpatched ({fmt})", one, want, 0.0,
           f"{where}; a second unpatched call is bit-identical to the first: {torch.equal(again, want)}")
    del again, one
    local = {layout.label(): _timed(rec, f"{layout.label()} TDP on 1 GPU ({fmt})",
                                    tdp(patcher, layout, audio_mode=AUDIO_MODE), inputs, sizes.sigma,
                                    layout=layout.label())
             for layout in (Layout(1, 2, sizes.four.overlap), sizes.four)}
    dev = str(device())
    settings = resolve_settings(2, f"{dev},{dev}", "gloo", GROUP_TIMEOUT_S, "127.0.0.1", 0, local_device=dev)
    group = get_group(settings)  # its workers start at the first call
    try:
        for layout, limit in ((None, 0.0), (Layout(1, 2, sizes.four.overlap), 0.0), (sizes.four, GROUP_LIMIT)):
            label = layout.label() if layout else "1x1"
            model = tdp(patcher, layout, group, audio_mode=AUDIO_MODE)
            got, seconds, peak = measure(lambda: model_call(model, inputs, sizes.sigma))
            reference = want if layout is None else local[label]
            first = "first call (the worker starts and gets the weights) " if layout is None else ""
            _check(rec, f"2-rank group == local, {label} ({fmt})", got, reference, limit,
                   f"{settings.backend}, devices {', '.join(settings.devices)}; {where}; {first}{seconds:.1f} s",
                   seconds=seconds, peak_gib=peak, layout=label)
    finally:
        group.shutdown()
