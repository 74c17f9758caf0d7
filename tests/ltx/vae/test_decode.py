"""Tiled VAE decode on the tiny real LTX VAE (ComfyUI's own VideoVAE, CPU): exact where it must be, no seams,
no jumps between temporal chunks, ranks whose partial sums add up to the decode, one shared noise field, and
the real-configuration LTX-2 decoder equal to its untiled decode at the default quality."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.vae_helpers import (OneProcessGroup, borders, latent, plan, psnr, reach_cells, seam_ratio, settings,
                                        tiled, untiled)


def test_one_tile_covering_everything_is_bit_identical_to_vae_decode(vae):
    x = latent(3, 3, 4)
    want = untiled(vae, x)
    got = tiled(vae, x)
    assert got.dtype == torch.float32 and got.device.type == "cpu", f"{got.dtype} on {got.device}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"


def test_spatial_tiles_with_context_at_least_the_decoders_reach_match_untiled_without_seams(vae):
    _, context = reach_cells(vae)  # 5 latent cells for the tiny decoder
    x = latent(2, 6, 8, seed=2)
    settings = dict(spatial_tile=128, spatial_overlap=32, context=context)
    layout = plan(vae, x, 0, context, spatial_tile=128, spatial_overlap=32)
    assert layout.pixels.counts == (1, 2, 3), f"tile counts {layout.pixels.counts}"
    want = untiled(vae, x)
    got = tiled(vae, x, **settings)
    quality = psnr(got, want)
    assert quality >= 40, f"PSNR {quality:.1f} dB against the untiled decode"
    for axis, name in ((2, "height"), (3, "width")):
        edges = borders(layout.pixels.axis_intervals[axis - 1])
        ratio = seam_ratio(got, axis, edges)
        reference = seam_ratio(want, axis, edges)
        assert abs(ratio - 1) <= 0.10, (
            f"{name}: gradient across tile borders {edges} is {ratio:.3f}x the gradient inside tiles "
            f"(untiled: {reference:.3f}x)"
        )


def test_temporal_chunks_keep_the_frame_count_and_add_no_jump_between_chunks(vae):
    context, _ = reach_cells(vae)
    x = latent(8, 2, 3, seed=3)  # 57 frames
    layout = plan(vae, x, context, 0, temporal_tile=25, temporal_overlap=8)
    assert layout.pixels.counts[0] >= 3, f"expected several temporal chunks, got {layout.pixels.counts}"
    want = untiled(vae, x)
    got = tiled(vae, x, temporal_tile=25, temporal_overlap=8, context=context)
    assert got.shape[1] == want.shape[1] == 57, f"{got.shape[1]} frames, untiled {want.shape[1]}"
    quality = psnr(got, want)
    assert quality >= 40, f"PSNR {quality:.1f} dB against the untiled decode"
    jump_got = (got[:, 1:] - got[:, :-1]).abs().mean(dim=(0, 2, 3, 4))
    jump_want = (want[:, 1:] - want[:, :-1]).abs().mean(dim=(0, 2, 3, 4))
    for edge in borders(layout.pixels.axis_intervals[0]):
        k = edge - 1  # the jump from frame edge-1 to frame edge
        assert jump_got[k] <= 1.1 * jump_want[k] + 1e-4, (
            f"jump into frame {edge}: {jump_got[k]:.4f}, untiled {jump_want[k]:.4f}"
        )


def test_a_chunk_that_starts_inside_the_clip_lines_up_with_the_untiled_frames(vae):
    # Chunks of 4 latent frames, overlap 1: the last one owns frames [33, 57) (latent frames 5..7). Decoded
    # from latent frame 5 it would start at frame 40, so it decodes from latent frame 4 (whose one-frame
    # head is frame 32) minus the context, and is cropped to start exactly at frame 33.
    context, _ = reach_cells(vae)
    x = latent(8, 2, 2, seed=4)
    want = untiled(vae, x)
    got = tiled(vae, x, temporal_tile=33, temporal_overlap=8, context=context)
    per_frame = [psnr(got[:, f], want[:, f]) for f in range(want.shape[1])]
    assert min(per_frame) >= 40, f"worst frame {per_frame.index(min(per_frame))}: {min(per_frame):.1f} dB"


def test_ranks_partial_sums_add_up_to_the_full_decode_and_the_job_gives_each_ranks_tiles(vae):
    x = latent(2, 4, 4, seed=5)
    settings = dict(spatial_tile=96, spatial_overlap=16, context=1)
    full = tiled(vae, x, **settings).permute(0, 4, 1, 2, 3)  # channels first, as the ranks' sums are
    two = OneProcessGroup(2)
    tiled(vae, x, group=two, **settings)
    total = two.parts[0] + two.parts[1]
    assert torch.allclose(total, full, rtol=0, atol=1e-6), f"off by {(total - full).abs().max().item():.2e}"
    assert all(p.abs().max() > 0.1 for p in two.parts), "a rank with tiles added nothing"
    from ltx_tdp.ltx.vae.pixels import processed
    from ltx_tdp.tiling import add_tile

    raw_tile = two.job.tiles(vae, torch.device("cpu"))  # what a worker rank runs for its tiles, and sends
    for rank, part in enumerate(two.parts):
        sent = torch.zeros_like(full)
        for tile in two.plan.tiles_for_rank(rank, 2):
            add_tile(sent, tile, processed(vae, raw_tile(tile)))  # what rank 0 makes of them
        err = (sent - part).abs().max().item()
        assert err <= 1e-6, f"rank {rank}: the job's tiles differ from the rank's partial sum by {err:.2e}"
    eight = OneProcessGroup(8)  # 4 tiles, 8 ranks: rank 7 has none
    tiled(vae, x, group=eight, **settings)
    assert not eight.parts[7].any(), "a rank without tiles must add nothing"


def test_a_tile_leaves_the_decoder_cropped_in_the_vaes_dtype_and_is_processed_as_vae_decode_does(comfy, model_names):
    """A bf16 VAE: what a tile's decode hands on is its crop (not the decoded block with its context) in bf16 (not
    a 4-byte copy), and processed in fp32 in system memory it gives VAE.decode's frames bit for bit."""
    import comfy.sd
    import comfy.utils
    import folder_paths
    from ltx_tdp.ltx.vae.decoder import prepare_decode

    sd, meta = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", model_names["vae"]),
                                           return_metadata=True)
    half = comfy.sd.VAE(sd=sd, metadata=meta, dtype=torch.bfloat16)
    x = latent(2, 4, 6, seed=8)
    decode = prepare_decode(half, x, settings(spatial_tile=96, spatial_overlap=32, context=2))
    for tile in decode.plan.pixels.tiles:
        raw = decode.decode_raw(tile)
        assert raw.dtype == torch.bfloat16 and tuple(raw.shape) == (1, 3, *tile.shape), \
            f"tile {tile.index}: {raw.dtype} {tuple(raw.shape)}, the tile is {tile.shape}"
    got, want = tiled(half, x), untiled(half, x)
    assert got.dtype == torch.float32 and torch.equal(got, want), \
        f"one bf16 tile vs VAE.decode: max difference {(got - want).abs().max().item():.3e}"


def test_timestep_conditioned_decode_noise_is_one_seeded_field_shared_by_overlapping_tiles(noisy_vae):
    _, context = reach_cells(noisy_vae)
    x = latent(2, 4, 6, seed=6)
    one = tiled(noisy_vae, x, seed=11)
    again = tiled(noisy_vae, x, seed=11)
    assert torch.equal(one, again), "the same seed must decode to the same frames"
    other = tiled(noisy_vae, x, seed=12)
    assert not torch.equal(one, other), "the seed changes nothing: the decode noise is not applied"
    pieces = tiled(noisy_vae, x, seed=11, spatial_tile=96, spatial_overlap=16, context=context)
    quality = psnr(pieces, one)
    assert quality >= 40, f"tiles vs one tile with the same noise field: PSNR {quality:.1f} dB"


@pytest.fixture(scope="module")
def ltx2_vae(comfy):
    """ComfyUI's VideoVAE at LTX-2's published config, random weights, loaded by comfy.sd.VAE (see ltx_tdp_devkit.real_vae)."""
    from ltx_tdp_devkit import real_vae

    if not real_vae.builds_ltx2_vae():
        pytest.skip("this ComfyUI's VideoVAE cannot build the LTX-2 VAE config (no LTX-2)")
    return real_vae.real_vae(real_vae.LTX2_VAE_CONFIG, seed=5)


@pytest.mark.slow
def test_at_the_default_quality_real_ltx2_tiles_equal_the_untiled_decode_within_fp32_rounding(comfy, ltx2_vae):
    """Two tiles across a 40-cell row (each decodes its 16 cells of context, far less than the whole row) and
    two chunks of a 33-latent-frame clip (14 latent frames of context each): the decoder's reach, so the
    crops are the untiled decode's pixels up to fp32 rounding (different block shapes sum in another order)."""
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    for shape, settings in (((1, 1, 40), dict(spatial_tile=640)), ((33, 1, 1), dict(temporal_tile=136))):
        x = latent(*shape, seed=13)
        layout = plan(ltx2_vae, x, 14, 16, spatial_tile=settings.get("spatial_tile", 2048),
                      temporal_tile=settings.get("temporal_tile", 4096))
        sources = [layout.source(t).latent_shape for t in layout.pixels.tiles]
        assert len(sources) == 2 and all(s != shape for s in sources), f"{shape}: blocks {sources}"
        (got,) = comfy.run_node(TiledVAEDecodeNode, vae=ltx2_vae, samples={"samples": x}, **settings)
        (want,) = comfy.run_node("VAEDecode", vae=ltx2_vae, samples={"samples": x})
        diff = (got - want).abs().max().item()
        assert diff <= 1e-5, f"latent {shape}, blocks {sources}: max difference {diff:.2e}, PSNR {psnr(got, want):.1f} dB"
