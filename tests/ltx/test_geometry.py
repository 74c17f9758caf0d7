"""One latent geometry for the whole pack: the model's positions, the VAE's decode and the preview map latent
cells to pixels as `tiling.LTX_GEOMETRY` does, on the real ComfyUI models (the reach code's owned pixels are
`AxisScale.owned_pixels`, tests/tiling/test_geometry.py)."""

from __future__ import annotations

import torch

from ltx_tdp_devkit.vae_helpers import latent, untiled


def test_the_models_position_maps_scale_as_ltx_geometry_does(comfy, model_names, ltxav):
    from ltx_tdp.ltx.model.facts import geometry_of
    from ltx_tdp.tiling import LTX_GEOMETRY
    from ltx_tdp_devkit.ltx_helpers import load_ltxv

    for name, model in (("LTX-Video", load_ltxv(comfy, model_names)), ("LTX-2", ltxav)):
        dm = model.model.diffusion_model
        geometry = geometry_of(dm)
        assert geometry.factors == LTX_GEOMETRY.factors, f"{name}: factors {geometry.factors}"
        assert geometry.frames.causal == bool(getattr(dm, "causal_temporal_positioning", False)), name
        if geometry.frames.causal:
            assert geometry == LTX_GEOMETRY, f"{name}: {geometry}"


def test_the_vaes_decode_has_the_shape_ltx_geometry_gives(vae):
    from ltx_tdp.ltx.vae.inputs import vae_geometry
    from ltx_tdp.tiling import LTX_GEOMETRY

    assert vae_geometry(vae) == LTX_GEOMETRY
    frames = untiled(vae, latent(3, 2, 3))
    assert tuple(frames.shape[1:4]) == LTX_GEOMETRY.pixel_shape((3, 2, 3)), f"decoded {tuple(frames.shape)}"


def test_the_preview_describes_a_4k_latent_in_ltx_geometrys_pixels():
    from ltx_tdp.tiling import LTX_GEOMETRY, TileCountConfig
    from ltx_tdp.tiling.preview import preview_tiles

    shape = LTX_GEOMETRY.latent_shape(121, 2176, 3840)
    summary = preview_tiles(shape, TileCountConfig()).summary
    assert "121 frames at 3840 x 2176 px" in summary, summary
    assert torch.equal(torch.tensor(shape), torch.tensor((16, 68, 120)))
