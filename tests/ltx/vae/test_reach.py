"""The reach of LTX video VAE decoders (ComfyUI's own classes, real configurations, random weights): counted
over their kernels, paddings and upsamplers, and measured by gradients and perturbation on the CPU."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit import real_vae

WIDTH, HEIGHT, TIME = 4, 3, 2


def needs_ltx2_vae() -> None:
    if not real_vae.builds_ltx2_vae():
        pytest.skip("this ComfyUI's VideoVAE cannot build the LTX-2 VAE config (no LTX-2)")


@pytest.fixture(scope="module")
def ltx2_decoder(comfy):
    needs_ltx2_vae()
    return real_vae.real_video_vae(real_vae.LTX2_VAE_CONFIG, seed=3).decoder


@pytest.fixture(scope="module")
def tiny_decoder(comfy):
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    from ltx_tdp_devkit import tiny_models

    return real_vae.randomise(VideoVAE(config=tiny_models.VAE_CONFIG), seed=1).eval().decoder


def test_the_tiny_decoders_counted_reach_is_what_its_gradients_measure(tiny_decoder):
    from ltx_tdp.ltx.vae.reach import counted_reach, measured_reach

    counted = counted_reach(tiny_decoder)
    for axis, want, cells in ((WIDTH, counted.space, 16), (HEIGHT, counted.space, 16), (TIME, counted.time, 16)):
        got = measured_reach(tiny_decoder, 128, axis, cells)
        assert got == want, f"axis {axis}: measured {got}, counted {want}"
    assert counted.space.context < 16 // 2 and counted.time.context < 16 // 2, f"latent too short for {counted}"


@pytest.mark.slow
def test_the_ltx2_decoders_reach_is_16_cells_in_space_and_14_latent_frames_in_time_counted_and_measured(
        ltx2_decoder):
    from ltx_tdp.ltx.vae.reach import counted_reach, measured_reach
    from ltx_tdp.tiling.dependency import AxisReach

    counted = counted_reach(ltx2_decoder)
    assert counted.space == AxisReach(16, 16, 484, 484), f"counted space reach {counted.space}"
    assert counted.time == AxisReach(14, 14, 108, 108), f"counted time reach {counted.time}"
    # Latents 2 x reach + 5 cells long, so a gradient that stopped only at the latent's end would show.
    space = measured_reach(ltx2_decoder, 128, WIDTH, 2 * 16 + 5)
    assert space == counted.space, f"measured {space} over width, counted {counted.space}"
    time = measured_reach(ltx2_decoder, 128, TIME, 2 * 14 + 5)
    assert time == counted.time, f"measured {time} over time, counted {counted.time}"


def test_the_ltxv_095_decoders_reach_is_22_cells_in_space_and_time(comfy):
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    from ltx_tdp.ltx.vae.reach import counted_reach, whole_frame_layers
    from ltx_tdp.tiling.dependency import AxisReach

    needs_ltx2_vae()  # the same up/downsampler classes
    with torch.device("meta"):  # counting needs the layers, not their weights
        decoder = VideoVAE(config=real_vae.ltxv_095_config()).decoder
    counted = counted_reach(decoder)
    assert counted.space == AxisReach(22, 22, 692, 692), f"counted space reach {counted.space}"
    assert counted.time == AxisReach(22, 22, 173, 173), f"counted time reach {counted.time}"
    assert whole_frame_layers(decoder) == (), f"whole-frame layers {whole_frame_layers(decoder)}"


@pytest.mark.slow
def test_the_ltxv_095_decoders_measured_reach_across_width_is_its_counted_22_cells(comfy):
    """LTX-Video 0.9.5+: timestep-conditioned (0.05, ComfyUI's decode timestep), reflect padding (a latent
    two cells high). Only width is measured: its time axis would need a 49-latent-frame clip."""
    from ltx_tdp.ltx.vae.reach import counted_reach, measured_reach

    needs_ltx2_vae()
    decoder = real_vae.real_video_vae(real_vae.ltxv_095_config(), seed=4).decoder
    counted = counted_reach(decoder).space
    measured = measured_reach(decoder, 128, WIDTH, 2 * 22 + 5, timestep=0.05)
    assert measured == counted, f"measured {measured} over width, counted {counted}"


def test_no_layer_of_the_ltx2_decoder_mixes_the_whole_frame(ltx2_decoder):
    from ltx_tdp.ltx.vae.reach import dependency_spans, whole_frame_layers

    assert whole_frame_layers(ltx2_decoder) == (), f"whole-frame layers {whole_frame_layers(ltx2_decoder)}"
    # The gradient of the first pixel column of cell 20 of a 40-cell row stops 16 cells before it and 15
    # after it (the last column of the cell reaches the 16th), far from both ends of the row.
    x = torch.randn(1, 128, 1, 1, 40, generator=torch.Generator().manual_seed(0))
    [(first, last)] = dependency_spans(ltx2_decoder, x, (20 * 32,), WIDTH)
    assert (first, last) == (4, 35), f"pixel 640 depends on cells {first}..{last} of 0..39"


def test_a_group_norm_decoder_mixes_the_whole_frame_and_is_named(comfy):
    """The measurement's negative case: GroupNorm normalises over all of space and time, so every pixel
    depends on every latent cell and no finite context is exact."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    from ltx_tdp.ltx.vae.reach import counted_reach, dependency_spans, whole_frame_layers
    from ltx_tdp_devkit import tiny_models

    config = {**tiny_models.VAE_CONFIG, "norm_layer": "group_norm", "decoder_base_channels": 32,
              "encoder_base_channels": 32}
    decoder = real_vae.randomise(VideoVAE(config=config), seed=2).eval().decoder
    layers = whole_frame_layers(decoder)
    assert layers and all("norm" in name for name in layers), f"whole-frame layers {layers}"
    x = torch.randn(1, 128, 1, 2, 24, generator=torch.Generator().manual_seed(0))  # reflect padding: 2 rows
    [span] = dependency_spans(decoder, x, (12 * 32,), WIDTH)
    reach = counted_reach(decoder).space.context
    assert span == (0, 23) and 12 - reach > 0, f"pixel 384 depends on cells {span}; counted reach {reach}"
