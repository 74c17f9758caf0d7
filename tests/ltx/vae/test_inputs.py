"""What the tiled decode takes and refuses, and what it reports: nested audio+video latents, progress after
every tile, interrupts, and clear messages for a wrong latent, VAE or layout."""

from __future__ import annotations

import copy

import pytest
import torch

from ltx_tdp_devkit.vae_helpers import latent, plan, tiled


def test_the_video_part_of_an_audio_video_latent_is_decoded(vae):
    from comfy.nested_tensor import NestedTensor

    video = latent(2, 2, 2, seed=8)
    audio = torch.randn(1, 8, 5, 16)
    got = tiled(vae, NestedTensor([video, audio]))
    assert torch.equal(got, tiled(vae, video)), "the NestedTensor's video part decoded differently"


def test_progress_is_reported_after_every_tile(vae):
    x = latent(2, 2, 4, seed=9)
    tiles = len(plan(vae, x, spatial_tile=96, spatial_overlap=32).pixels)
    calls = []
    tiled(vae, x, spatial_tile=96, spatial_overlap=32, progress=lambda done, total: calls.append((done, total)))
    assert tiles > 1 and calls == [(i, tiles) for i in range(1, tiles + 1)], f"{tiles} tiles, progress calls {calls}"


def test_an_interrupt_stops_the_decode_before_the_next_tile(vae):
    import comfy.model_management as mm

    mm.interrupt_current_processing(True)
    try:
        with pytest.raises(mm.InterruptProcessingException):
            tiled(vae, latent(2, 2, 4), spatial_tile=96, spatial_overlap=32)
    finally:
        mm.interrupt_current_processing(False)


def test_an_image_latent_is_refused_with_a_clear_message(vae):
    from ltx_tdp.ltx.vae import VaeDecodeError

    with pytest.raises(VaeDecodeError, match=r"needs a video latent .* got an image latent of shape \(1, 4, 8, 8\)"):
        tiled(vae, torch.zeros(1, 4, 8, 8))


def test_a_latent_with_the_wrong_channel_count_is_refused(vae):
    from ltx_tdp.ltx.vae import VaeDecodeError

    with pytest.raises(VaeDecodeError, match="the latent has 16 channels but this VAE decodes 128-channel latents"):
        tiled(vae, torch.zeros(1, 16, 2, 2, 2))


def test_a_vae_whose_scale_factors_do_not_fit_its_decoder_is_refused(vae):
    from ltx_tdp.ltx.vae import VaeDecodeError

    wrong = copy.copy(vae)
    wrong.upscale_ratio = (vae.upscale_ratio[0], 16, 16)
    with pytest.raises(VaeDecodeError, match="scale factors do not fit"):
        tiled(wrong, latent(2, 2, 2))


def test_a_vae_that_is_not_an_ltx_video_vae_is_refused(vae):
    from ltx_tdp.ltx.vae import VaeDecodeError

    other = copy.copy(vae)
    other.first_stage_model = torch.nn.Identity()
    with pytest.raises(VaeDecodeError, match="needs an LTX video VAE"):
        tiled(other, latent(2, 2, 2))


def test_a_tile_smaller_than_twice_its_overlap_is_refused_before_decoding(vae):
    from ltx_tdp.tiling import TilingError

    with pytest.raises(TilingError, match=r"height: a tile of 96 pixels is too small for an overlap of 64 pixels"):
        tiled(vae, latent(2, 2, 2), spatial_tile=96, spatial_overlap=64)
    with pytest.raises(TilingError, match=r"frames: a tile of 16 frames is too small for an overlap of 24 frames"):
        tiled(vae, latent(2, 2, 2), temporal_tile=16, temporal_overlap=24)
