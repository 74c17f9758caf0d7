"""The TDP patcher on a real ComfyUI with a tiny real LTXV model: equivalence with the unpatched model, blending.

Every model call goes through ComfyUI's own APPLY_MODEL wrapper chain; where a test needs to look inside
a tile call it adds one more wrapper (with its own key) that runs inside the TDP wrapper, the way another
pack's wrapper would (`probe_tile_calls`). Positions, guides and i2v: test_patcher_conditioning.py; refusals,
interrupts and the drift warning: test_patcher_errors.py.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import (call_model, conditioning, ksample, load_ltxv, patch, probe_tile_calls, randn,
                                        tiling)


@pytest.mark.parametrize("cfg", [1.0, 3.0], ids=["cfg1", "cfg3-batched-cond-uncond"])
def test_one_by_one_tiling_is_bit_identical_to_unpatched_ksampler(comfy, model_names, cfg):
    model = load_ltxv(comfy, model_names)
    latent = {"samples": randn(1, 128, 3, 6, 8)}
    reference = ksample(comfy, model, latent, cfg=cfg)
    tiled = ksample(comfy, patch(model, tiling()), latent, cfg=cfg)
    assert torch.equal(tiled, reference), f"max abs diff {(tiled - reference).abs().max():.3e}"


def test_patcher_leaves_the_input_model_untouched(comfy, model_names):
    model = load_ltxv(comfy, model_names)
    latent = {"samples": randn(1, 128, 2, 8, 8)}
    before = ksample(comfy, model, latent)
    patched = patch(model, tiling(height=(2, 2), width=(2, 2)))
    tiled = ksample(comfy, patched, latent)
    after = ksample(comfy, model, latent)
    assert torch.equal(before, after)
    assert not torch.equal(tiled, before), "2x2 tiling changed nothing: the wrapper did not run"


@pytest.mark.parametrize("layout", [dict(height=(2, 2), width=(2, 2)),
                                    dict(frames=(2, 1), height=(2, 2), width=(2, 3))],
                         ids=["2x2-spatial", "2x2x2-spatiotemporal"])
def test_x0_identity_model_blends_back_to_the_input(comfy, model_names, layout):
    model = patch(load_ltxv(comfy, model_names), tiling(**layout))
    calls: list = []
    probe_tile_calls(model, calls, replace_output=True)
    x = randn(2, 128, 5, 10, 12, seed=4)
    out = call_model(model, x, 0.5)
    n_tiles = 1
    for axis in layout.values():
        n_tiles *= axis[0]
    assert len(calls) == n_tiles, f"{len(calls)} tile calls for {n_tiles} tiles"
    err = (out - x).abs().max().item()
    assert err <= 1e-6 * x.abs().max().item(), f"identity blend is off by {err:.3e}"


def test_region_covered_by_one_tile_equals_the_model_on_that_crop(comfy, model_names):
    model = load_ltxv(comfy, model_names)
    x = randn(1, 128, 2, 12, 12, seed=5)
    patched = call_model(patch(model, tiling(height=(2, 2), width=(2, 2))), x, 0.6)
    # Tiles are [0,7) and [5,12) on both axes; [0,5) and [7,12) are covered by one tile only.
    first = call_model(model, x[..., 0:7, 0:7].contiguous(), 0.6)
    last = call_model(model, x[..., 5:12, 5:12].contiguous(), 0.6)
    assert torch.equal(patched[..., 0:5, 0:5], first[..., 0:5, 0:5]), \
        f"top-left: max diff {(patched[..., 0:5, 0:5] - first[..., 0:5, 0:5]).abs().max():.3e}"
    assert torch.equal(patched[..., 7:12, 7:12], last[..., 2:7, 2:7]), \
        f"bottom-right: max diff {(patched[..., 7:12, 7:12] - last[..., 2:7, 2:7]).abs().max():.3e}"


def _sampler_custom_advanced(comfy, model, latent: dict, cfg: float) -> torch.Tensor:
    (noise,) = comfy.run_node("RandomNoise", noise_seed=5)
    (guider,) = comfy.run_node("CFGGuider", model=model, positive=conditioning(1), negative=conditioning(2), cfg=cfg)
    (sampler,) = comfy.run_node("KSamplerSelect", sampler_name="euler")
    (sigmas,) = comfy.run_node("BasicScheduler", model=model, scheduler="simple", steps=2, denoise=0.5)
    out, _ = comfy.run_node("SamplerCustomAdvanced", noise=noise, guider=guider, sampler=sampler, sigmas=sigmas,
                            latent_image=latent)
    return out["samples"]


def _ksampler_advanced(comfy, model, latent: dict, cfg: float) -> torch.Tensor:
    (out,) = comfy.run_node("KSamplerAdvanced", model=model, add_noise="enable", noise_seed=5, steps=3, cfg=cfg,
                            sampler_name="dpmpp_2m", scheduler="simple", positive=conditioning(1),
                            negative=conditioning(2), latent_image=latent, start_at_step=1, end_at_step=3,
                            return_with_leftover_noise="disable")
    return out["samples"]


@pytest.mark.parametrize("run", [_sampler_custom_advanced, _ksampler_advanced],
                         ids=["SamplerCustomAdvanced", "KSamplerAdvanced"])
def test_other_samplers_run_tiled_and_are_bit_identical_at_one_tile(comfy, model_names, run):
    model = load_ltxv(comfy, model_names)
    latent = {"samples": randn(1, 128, 2, 6, 8, seed=9)}
    reference = run(comfy, model, latent, 2.0)
    assert torch.equal(run(comfy, patch(model, tiling()), latent, 2.0), reference)
    calls: list = []
    tiled_model = probe_tile_calls(patch(model, tiling(height=(2, 2), width=(2, 2))), calls)
    tiled = run(comfy, tiled_model, latent, 2.0)
    assert calls and len(calls) % 4 == 0, f"{len(calls)} tile calls: not a whole number of 2x2 passes"
    assert torch.isfinite(tiled).all() and not torch.equal(tiled, reference)


def test_a_tile_size_config_samples_exactly_as_the_count_config_it_resolves_to(comfy, model_names):
    """Tiles of at most 24 frames (3 latent frames) and 224 px (7 cells), overlap at least 1 and 2: on 5 latent
    frames and a 12-cell width, 2 x 2 tiles overlapping 1 frame and 2 cells."""
    from ltx_tdp.tiling import AxisTiling, TileCountConfig, TileSizeConfig

    model = load_ltxv(comfy, model_names)
    latent = {"samples": randn(1, 128, 5, 6, 12, seed=12)}
    sized = TileSizeConfig.of_pixels(224, 4096, 2, frames=24, min_frames_overlap=1)
    counted = sized.resolve((5, 6, 12))
    assert counted == TileCountConfig(AxisTiling(2, 1), AxisTiling(1, 2), AxisTiling(2, 2)), counted
    calls: list = []
    by_size = ksample(comfy, probe_tile_calls(patch(model, sized), calls), latent, cfg=2.0)
    by_count = ksample(comfy, patch(model, counted), latent, cfg=2.0)
    assert torch.equal(by_size, by_count), f"max abs diff {(by_size - by_count).abs().max():.3e}"
    assert len(calls) % 4 == 0 and {tuple(c["x"].shape[2:]) for c in calls} == {(3, 6, 7)}, \
        f"tile calls of shapes {sorted({tuple(c['x'].shape[2:]) for c in calls})}, expected 2 x 1 x 2 of 3 x 6 x 7"
