"""The trained position range (`positional_embedding_max_pos`) is read from the loaded model, wherever the pack
reasons about in-distribution tile sizes: the tile preview, the balanced config and the patcher. A tiny LTXV
whose checkpoint metadata narrows it to [20 s, 256 px, 384 px], loaded by ComfyUI's own loader, on every version."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import call_model, load_ltxv, patch, randn, tiling


@pytest.fixture(scope="module")
def narrow_ltxv(comfy):
    import comfy.ldm.lightricks.model as ltx
    import comfy.ops
    import comfy.sd
    from ltx_tdp_devkit.tiny_models import LTXV_CONFIG, seeded_state_dict
    import json

    config = {**LTXV_CONFIG, "positional_embedding_max_pos": [20, 256, 384]}
    sd = seeded_state_dict(ltx.LTXVModel(**config, operations=comfy.ops.disable_weight_init), seed=5)
    model = comfy.sd.load_diffusion_model_state_dict(sd, metadata={"config": json.dumps({"transformer": config})})
    if getattr(model.model.diffusion_model, "positional_embedding_max_pos", None) is None:
        pytest.skip("this ComfyUI's LTXV model keeps no positional_embedding_max_pos to read")
    return model


def test_position_range_is_read_from_the_loaded_model(comfy, model_names, narrow_ltxv):
    from ltx_tdp.ltx.model.facts import position_range
    from ltx_tdp.tiling import PositionRange

    assert position_range(narrow_ltxv) == PositionRange(20, 256, 384), position_range(narrow_ltxv)
    default = load_ltxv(comfy, model_names)
    assert position_range(default) == PositionRange(20, 2048, 2048), position_range(default)


def test_tile_preview_checks_tiles_against_the_models_range(comfy, narrow_ltxv):
    from ltx_tdp.nodes.tile_preview import TilePreviewNode

    latent = {"samples": torch.zeros(1, 128, 2, 16, 16)}  # 512 x 512 px
    _, whole = comfy.run_node(TilePreviewNode, tiling=tiling(), latent=latent, model=narrow_ltxv)
    assert "height 512 px > 256 px" in whole and "width 512 px > 384 px" in whole, whole
    _, split = comfy.run_node(TilePreviewNode, tiling=tiling(height=(2, 0), width=(2, 0)), latent=latent,
                              model=narrow_ltxv)
    assert "outside the model's trained position range" not in split, split
    _, unknown = comfy.run_node(TilePreviewNode, tiling=tiling(), latent=latent)
    assert "connect the model" in unknown, unknown


def test_balanced_config_and_patcher_warn_from_the_models_range(comfy, narrow_ltxv, caplog):
    from ltx_tdp.nodes.tile_config import BalancedTileConfigNode

    latent = {"samples": torch.zeros(1, 128, 2, 16, 24)}  # 768 x 512 px
    with caplog.at_level("WARNING"):
        (two,) = comfy.run_node(BalancedTileConfigNode, gpus=2, overlap=0, latent=latent, model=narrow_ltxv)
    assert "outside the model's trained position range (height 512 px > 256 px)" in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        comfy.run_node(BalancedTileConfigNode, gpus=4, overlap=0, latent=latent, model=narrow_ltxv)
    assert "position range" not in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        call_model(patch(narrow_ltxv, two), randn(1, 128, 2, 16, 24), 0.5)
    assert "outside the model's trained position range (height 512 px > 256 px)" in caplog.text, caplog.text
