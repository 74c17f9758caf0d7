"""The tile preview node in a real ComfyUI: it previews the layout the patcher will blend, and refuses
exactly what the patcher refuses, with the same message."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import call_model, load_ltxv, patch, tiling


def _preview(comfy, tiles, **inputs):
    from ltx_tdp.nodes.tile_preview import TilePreviewNode

    return comfy.run_node(TilePreviewNode, tiling=tiles, **inputs)


def test_preview_of_a_latent_shows_a_flat_exact_weight_sum(comfy):
    from ltx_tdp.tiling.preview import EXACT_COLOUR

    latent = {"samples": torch.zeros(1, 128, 3, 8, 12)}
    image, summary = _preview(comfy, tiling(height=(2, 2), width=(3, 2)), latent=latent)
    assert image.ndim == 4 and image.shape[0] == 1 and image.shape[-1] == 3, tuple(image.shape)
    assert "latent 3 x 8 x 12" in summary and "6 tiles" in summary, summary
    assert "sum to exactly 1" in summary, summary
    # The heat panel (right half of the top row) is one flat "exact" colour.
    cell = (image.shape[2] - 24) // 24
    heat = image[0, 8: 8 + 8 * cell, 16 + 12 * cell: 16 + 24 * cell]
    assert torch.equal(heat, torch.tensor(EXACT_COLOUR).expand_as(heat))


def test_without_a_latent_the_pixel_size_sets_the_grid(comfy):
    _, summary = _preview(comfy, tiling(height=(2, 5), width=(2, 5)), width=3840, height=2176, frames=121)
    assert summary.startswith("latent 16 x 68 x 120"), summary


def test_an_ltx2_audio_video_latent_previews_its_video_part(comfy):
    from ltx_tdp_devkit.tiny_models import has_ltxav

    if not has_ltxav():
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no LTX-2 audio+video latents")
    (av,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": torch.zeros(1, 128, 2, 6, 10)},
                           audio_latent={"samples": torch.zeros(1, 8, 5, 16), "type": "audio"})
    _, summary = _preview(comfy, tiling(width=(2, 2)), latent=av)
    assert summary.startswith("latent 2 x 6 x 10"), summary


def _refusals(comfy, model_names, tiles, width: int) -> tuple[str, str]:
    """(the patcher's, the preview's) TilingError message for `tiles` on a latent `width` cells wide."""
    from ltx_tdp.tiling import TilingError

    model = patch(load_ltxv(comfy, model_names), tiles)
    with pytest.raises(TilingError) as patched:
        call_model(model, torch.randn(1, 128, 1, 4, width), 0.5)
    with pytest.raises(TilingError) as previewed:
        _preview(comfy, tiles, latent={"samples": torch.zeros(1, 128, 1, 4, width)})
    return str(patched.value), str(previewed.value)


def test_a_refused_layout_fails_with_the_patchers_message(comfy, model_names):
    patched, previewed = _refusals(comfy, model_names, tiling(width=(3, 8)), 21)
    assert previewed == patched
    assert previewed == ("width: 21 latent cells cannot take 3 tiles with overlap 8; "
                         "the largest overlap that keeps the blend exact is 5")


def _size_config(comfy, **inputs):
    from ltx_tdp.nodes.tile_config import TileSizeConfigNode

    defaults = dict(tile_width=2048, tile_height=2048, min_overlap=5, tile_frames=0, min_frames_overlap=1)
    (config,) = comfy.run_node(TileSizeConfigNode, **{**defaults, **inputs})
    return config


def test_the_tile_size_config_previews_the_counts_and_overlaps_it_resolves_to(comfy):
    """3840 x 2176 in tiles of at most 2048 px: 2 x 2 tiles of 64 cells, overlapping 60 (height) and 8 (width)."""
    _, summary = _preview(comfy, _size_config(comfy), width=3840, height=2176, frames=121)
    assert "4 tiles: frames 1 (overlap 0) x height 2 (overlap 60) x width 2 (overlap 8)" in summary, summary
    assert "largest tile: 16 x 64 x 64 latent" in summary and "sum to exactly 1" in summary, summary


def test_a_tile_size_too_small_for_its_overlap_fails_in_the_config_node(comfy):
    from ltx_tdp.tiling import TilingError

    with pytest.raises(TilingError, match=r"width: a tile of 288 px is 9 latent cell\(s\) of 32 px, too short for a "
                                          r"minimum overlap of 5 cells at both ends; use tiles of at least 352 px"):
        _size_config(comfy, tile_width=288)


def test_a_tile_size_no_count_split_fits_fails_in_the_preview_with_the_patchers_message(comfy, model_names):
    tiles = _size_config(comfy, tile_width=352, min_overlap=5)  # 11 cells: 18 cells have no count split
    patched, previewed = _refusals(comfy, model_names, tiles, 18)
    assert previewed == patched
    assert previewed.startswith("width: 18 latent cells cannot be cut into tiles of at most 11 cells"), previewed
