"""Correctness on the device, with the test suite's tiny models (seconds each).

Every check compares the pack's public paths (`ltx.model.apply_tdp`, `ltx.vae.decode_tiled`, a
`multigpu` group's ranks and `decode`) against ComfyUI's own unpatched model and `vae.decode`, and
records the measured difference with its limit.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from models import call_inputs, load_tiny_transformer, load_tiny_vae, model_call, tdp
from runtime import Records, device
from sizes import Layout

LATENT = (3, 8, 10)
"""Tiny video latent (frames, height, width): 2 x 2 tiles with overlap 2 are [0, 5) [3, 8) and [0, 6) [4, 10)."""

LAYOUT = Layout(2, 2, 2)
SIGMA = 0.6

BF16_LIMIT = 2.0**-5
"""2 x 2 TDP in bf16 against the fp32 CPU reference: max |difference| / max |reference| at most 2^-5 (about
3 %). bf16 keeps 8 significant bits (relative rounding 2^-9); a layer's matrix products and attention add
up many such roundings, which the measured error of the plain model in bf16 (recorded beside) shows."""

GROUP_LIMIT = 1e-6
"""A group sums the same fp32 tile results in another order (per rank, then all_reduce): relative 1e-6."""


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def _dtypes(patcher: Any) -> str:
    """The weight dtype ComfyUI loaded and the dtype it computes in (manual cast, e.g. bf16 weights on a CPU)."""
    weights = patcher.model.get_dtype()
    compute = patcher.model.manual_cast_dtype or weights
    return f"weights {str(weights)[6:]}, compute {str(compute)[6:]}"


def one_by_one_bit_identical(rec: Records, base_dir: Path) -> None:
    """1 x 1 TDP returns exactly what the unpatched model returns, in bf16 and in fp32, on the device."""
    for dtype in (torch.float32, torch.bfloat16):
        name = f"1x1 TDP == unpatched ({str(dtype)[6:]})"
        model = load_tiny_transformer(base_dir, dtype)
        inputs = call_inputs(model, LATENT, 5, 8, seed=1)
        want = inputs.video(model_call(model, inputs, SIGMA))
        got = inputs.video(model_call(tdp(model, None), inputs, SIGMA))
        again = inputs.video(model_call(model, inputs, SIGMA))  # control: is the plain model itself repeatable?
        equal = torch.equal(got, want)
        rec.add(name, "ok" if equal else "fail", value=(got.double() - want.double()).abs().max().item(),
                limit=0.0, detail=f"bit-identical: {equal}; {_dtypes(model)}; x0 {tuple(want.shape)} on {want.device}; "
                f"a second unpatched call is bit-identical to the first: {torch.equal(again, want)}")


def two_by_two_bf16_matches_fp32_cpu(rec: Records, base_dir: Path) -> None:
    """2 x 2 TDP with bf16 weights on the device against 2 x 2 TDP in fp32 on the CPU (same weights)."""
    cpu = torch.device("cpu")
    ref_model = load_tiny_transformer(base_dir, torch.float32, cpu)
    ref_inputs = call_inputs(ref_model, LATENT, 5, 8, seed=2, dev=cpu)
    ref_tdp = ref_inputs.video(model_call(tdp(ref_model, LAYOUT), ref_inputs, SIGMA))
    ref_plain = ref_inputs.video(model_call(ref_model, ref_inputs, SIGMA))
    model = load_tiny_transformer(base_dir, torch.bfloat16)
    inputs = ref_inputs.to(device())
    got_tdp = inputs.video(model_call(tdp(model, LAYOUT), inputs, SIGMA))
    got_plain = inputs.video(model_call(model, inputs, SIGMA))
    err, plain_err = relative(got_tdp, ref_tdp), relative(got_plain, ref_plain)
    ok = err <= BF16_LIMIT and math.isfinite(err)
    rec.add("2x2 TDP bf16 (device) vs fp32 (CPU)", "ok" if ok else "fail", value=err, limit=BF16_LIMIT,
            detail=f"{_dtypes(model)}; max |diff| / max |ref| = {err:.2e}; the unpatched model's own bf16 error: "
            f"{plain_err:.2e}")


def one_tile_decode_bit_identical(rec: Records, base_dir: Path) -> None:
    """The tiled VAE decode with one tile covering the latent returns exactly `vae.decode`'s frames."""
    from ltx_tdp.ltx.vae import DecodeSettings, decode_tiled
    from ltx_tdp_devkit.ltx_helpers import randn

    vae = load_tiny_vae(base_dir)
    x = randn(1, 128, 3, 3, 4, seed=3)
    with torch.inference_mode():
        want = vae.decode(x)
    got = decode_tiled(vae, x, DecodeSettings(spatial_tile=4096))
    equal = got.shape == want.shape and torch.equal(got, want.to(got.dtype))
    diff = (got.double() - want.double()).abs().max().item() if got.shape == want.shape else math.inf
    rec.add("tiled decode, 1 tile == vae.decode", "ok" if equal else "fail", value=diff, limit=0.0,
            detail=f"bit-identical: {equal}; frames {tuple(got.shape)}; VAE {str(vae.vae_dtype)[6:]} on {vae.device}")


def two_rank_group_matches_single_process(rec: Records, base_dir: Path) -> None:
    """A 2-rank group with both ranks on this device (gloo) gives the single-process TDP call and decode."""
    from ltx_tdp.ltx.vae import DecodeSettings, decode_tiled
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import resolve_settings
    from ltx_tdp_devkit.ltx_helpers import randn

    dev = str(device())
    settings = resolve_settings(2, f"{dev},{dev}", "gloo", 60, "127.0.0.1", 0, local_device=dev)
    group = get_group(settings)
    try:
        model = load_tiny_transformer(base_dir, torch.float32)
        inputs = call_inputs(model, LATENT, 5, 8, seed=4)
        single = inputs.video(model_call(tdp(model, LAYOUT), inputs, SIGMA))
        multi = inputs.video(model_call(tdp(model, LAYOUT, group), inputs, SIGMA))
        err = relative(multi, single)
        rec.add("2-rank group == single process (model call)", "ok" if err <= GROUP_LIMIT else "fail", value=err,
                limit=GROUP_LIMIT, detail=f"{settings.backend}, devices {', '.join(settings.devices)}; "
                f"max |diff| / max |x0| = {err:.2e}")
        vae = load_tiny_vae(base_dir)
        x = randn(1, 128, 4, 4, 6, seed=5)
        tiles = DecodeSettings(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8)
        want = decode_tiled(vae, x, tiles)
        got = decode_tiled(vae, x, tiles, group=group)
        err = relative(got, want)
        rec.add("2-rank group == single process (tiled decode)", "ok" if err <= GROUP_LIMIT else "fail", value=err,
                limit=GROUP_LIMIT, detail=f"frames {tuple(got.shape)}; max |diff| / max |frames| = {err:.2e}")
    finally:
        group.shutdown()
