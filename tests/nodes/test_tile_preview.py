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


def test_a_refused_layout_fails_with_the_patchers_message(comfy, model_names):
    from ltx_tdp.tiling import TilingError

    tiles = tiling(width=(3, 8))
    model = patch(load_ltxv(comfy, model_names), tiles)
    with pytest.raises(TilingError) as patched:
        call_model(model, torch.randn(1, 128, 1, 4, 21), 0.5)
    with pytest.raises(TilingError) as previewed:
        _preview(comfy, tiles, latent={"samples": torch.zeros(1, 128, 1, 4, 21)})
    assert str(previewed.value) == str(patched.value)
    assert str(previewed.value) == ("width: 21 latent cells cannot take 3 tiles with overlap 8; "
                                    "the largest overlap that keeps the blend exact is 5")
