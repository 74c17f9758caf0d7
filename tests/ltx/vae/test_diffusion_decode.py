"""LTX-2.5's diffusion video decoder (ComfyUI's CausalDiffusionVAE, tiny and at its published configuration,
random weights, loaded by comfy.sd.VAE): its counted reach is what perturbing the latent measures, tiles equal
`vae.decode` across spatial seams and temporal chunks, the node takes this path on its own, and a decoder whose
layers cannot be counted is refused."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.vae_helpers import latent, plan, psnr, tiled, untiled

FP32 = 1e-5
"""fp32 rounding of differently shaped blocks (the same sums in another order)."""


@pytest.fixture(scope="module")
def dvae(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    return dv.load(seed=1)


def _changed_by(vae, x: torch.Tensor, axis: int, pixels: range) -> list[int]:
    """Latent cells along `axis` whose bump changes any of `pixels` (along that axis) of `vae.decode(x)`:
    bit-exact comparison with the same (seed-0) noise, so an untouched pixel is computed from identical inputs."""
    base = untiled(vae, x)
    out_axis = {2: 1, 3: 2, 4: 3}[axis]  # decode output is (batch, frames, height, width, channels)
    cells = []
    for c in range(x.shape[axis]):
        bumped = x.clone()
        bumped.narrow(axis, c, 1).add_(1.0)
        diff = (untiled(vae, bumped) != base).movedim(out_axis, 0)[pixels.start:pixels.stop]
        if diff.any():
            cells.append(c)
    return cells


def test_the_tiny_decoders_counted_reach_is_what_perturbing_the_latent_measures(dvae):
    from ltx_tdp.ltx.vae.diffusion import DiffusionDecode

    reach = DiffusionDecode.reach(dvae)
    time, space = reach.time.context, reach.space.context
    assert (time, space) == (5, 9), f"counted reach {reach}"
    n = 2 * space + 5  # long enough that a dependency stopping only at the latent's end would show
    c = n // 2
    cells = _changed_by(dvae, latent(1, 1, n, seed=3), 4, range(32 * c, 32 * c + 32))
    assert (c - cells[0], cells[-1] - c) == (reach.space.before, reach.space.after), \
        f"width: cells {cells} change cell {c}'s pixels"
    n = 2 * time + 5
    c = n // 2
    cells = _changed_by(dvae, latent(n, 1, 1, seed=4), 2, range(8 * c - 7, 8 * c + 1))
    assert (c - cells[0], cells[-1] - c) == (reach.time.before, reach.time.after), \
        f"time: cells {cells} change cell {c}'s frames"


def test_the_published_decoders_counted_reach_is_31_cells_in_space_and_18_latent_frames_in_time(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    from comfy.ldm.lightricks.vae.na_diffusion_decoder import CausalDiffusionVAE
    from ltx_tdp.ltx.vae.diffusion_layers import counted_reach, read_layers, stage5_reach

    with torch.device("meta"):  # counting needs the layers, not their weights
        decoder = CausalDiffusionVAE(config=dv.published_config()).decoder
    layers = read_layers(decoder)
    reach = counted_reach(layers)
    sides = ((reach.space.before, reach.space.after), (reach.time.before, reach.time.after))
    assert sides == ((31, 31), (18, 18)), f"counted {reach}"
    assert stage5_reach(layers) == (5, 5), f"stage 5 alone {stage5_reach(layers)}"


def test_one_tile_covering_everything_is_bit_identical_to_vae_decode(dvae):
    x = latent(3, 2, 3, seed=2)
    want = untiled(dvae, x)
    got = tiled(dvae, x)
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"


@pytest.mark.parametrize("layout", [
    dict(spatial_tile=64),
    dict(temporal_tile=16),
    dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8),
], ids=["spatial-seams", "temporal-chunks", "both-with-overlaps"])
def test_at_the_default_quality_tiles_equal_vae_decode_across_seams_and_chunks(dvae, layout):
    x = latent(5, 4, 5, seed=5)
    counts = plan(dvae, x, **layout).pixels.counts
    assert max(counts) > 1 and (counts[0] > 1 or "temporal_tile" not in layout), f"tile counts {counts}"
    want = untiled(dvae, x)
    got = tiled(dvae, x, **layout)
    diff = (got - want).abs().max().item()
    assert diff <= FP32, f"{counts} tiles: max difference {diff:.2e} ({psnr(got, want):.1f} dB)"


def test_the_node_decodes_an_ltx25_vae_exactly_at_its_defaults_and_with_small_tiles(comfy, dvae):
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    x = latent(3, 3, 4, seed=6)
    with torch.inference_mode():  # as ComfyUI's executor runs nodes (this VAE's in-place RoPE needs it)
        (want,) = comfy.run_node("VAEDecode", vae=dvae, samples={"samples": x})
    for inputs in (dict(), dict(spatial_tile=64, temporal_tile=16, quality="fast")):
        (got,) = comfy.run_node(TiledVAEDecodeNode, vae=dvae, samples={"samples": x}, **inputs)
        diff = (got - want).abs().max().item()
        assert got.shape == want.shape and diff <= FP32, f"{inputs}: max difference {diff:.2e}"


def test_a_decoder_with_a_layer_the_reach_cannot_count_is_refused_with_a_message(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    from ltx_tdp.ltx.vae import VaeDecodeError

    vae = dv.load(seed=2)
    vae.first_stage_model.decoder.norm_out = torch.nn.GroupNorm(1, 16)  # mixes every position
    with pytest.raises(VaeDecodeError, match="cannot count.*norm_out: GroupNorm"):
        tiled(vae, latent(2, 2, 2))


def test_a_fast_preset_shorter_than_stage_5s_reach_is_close_but_not_exact(comfy):
    """Stage 5's reach on a decoder with 2 diffusion steps is 4 cells; context 1 must cost accuracy, still
    be close (the stages before it stay exact), and the exact default must not."""
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    vae = dv.load(dv.tiny_config(default_num_inference_steps=2), seed=3)
    x = latent(2, 3, 6, seed=7)
    want = untiled(vae, x)
    exact = tiled(vae, x, spatial_tile=64)
    short = tiled(vae, x, spatial_tile=64, context=1)
    assert (exact - want).abs().max().item() <= FP32, "exact tiles of a two-step decoder differ"
    quality = psnr(short, want)
    assert 25 <= quality < 120, f"context 1 of a 4-cell stage-5 reach: {quality:.1f} dB"


@pytest.mark.slow
def test_the_published_configuration_tiles_equal_vae_decode_across_a_seam_and_a_chunk(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    vae = dv.load(dv.published_config(), seed=4)
    x = latent(3, 2, 2, seed=8)
    layout = dict(spatial_tile=32, temporal_tile=16)
    counts = plan(vae, x, **layout).pixels.counts
    assert counts[0] > 1 and counts[2] > 1, f"tile counts {counts}"
    want = untiled(vae, x)
    got = tiled(vae, x, **layout)
    diff = (got - want).abs().max().item()
    assert diff <= FP32, f"{counts} tiles: max difference {diff:.2e} ({psnr(got, want):.1f} dB)"
