"""2 and 3 ranks give what the single-process patcher gives: per model call and over a KSampler run."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.ltx_helpers import call_model, ksample, patch, randn, tiling

pytestmark = pytest.mark.distributed

LAYOUTS = {"4-tiles": dict(height=(2, 2), width=(2, 2)), "2-tiles": dict(width=(2, 2))}



@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def group(request, comfy, group_factory):
    g = group_factory(request.param)
    yield g
    g.shutdown()


def _count_rank0_tiles(model, calls: list):
    import comfy.patcher_extension as ext

    def wrapper(executor, *args, **kw):
        calls.append(1)
        return executor(*args, **kw)

    model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_count", wrapper)
    return model


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_x0_of_a_model_call_equals_single_process(ltxv, group, layout):
    x = randn(2, 128, 3, 8, 10, seed=1)
    single = call_model(patch(ltxv, tiling(**layout)), x, 0.6)
    rank0_tiles: list = []
    multi = call_model(_count_rank0_tiles(patch(ltxv, tiling(**layout), group=group), rank0_tiles), x, 0.6)
    err = (multi - single).abs().max().item()
    assert err <= 1e-6, f"{group.rank_count} ranks, {layout}: x0 differs by {err:.3e} (limit 1e-6)"
    n_tiles = 4 if "height" in layout else 2
    share = len(range(0, n_tiles, group.rank_count))
    assert len(rank0_tiles) == share, f"rank 0 ran {len(rank0_tiles)} of {n_tiles} tiles, its share is {share}"


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_ksampler_result_equals_single_process(comfy, ltxv, group, layout):
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    single = ksample(comfy, patch(ltxv, tiling(**layout)), latent, steps=3, cfg=2.0)
    multi = ksample(comfy, patch(ltxv, tiling(**layout), group=group), latent, steps=3, cfg=2.0)
    err = (multi - single).abs().max().item()
    assert err <= 1e-5, f"{group.rank_count} ranks, {layout}: KSampler result differs by {err:.3e} (limit 1e-5)"


def test_a_tile_size_config_over_the_group_equals_single_process(comfy, ltxv, group):
    """The size config travels in the model job and resolves on every rank to the same tiles."""
    from ltx_tdp.tiling import TileSizeConfig

    sized = TileSizeConfig.of_pixels(192, 192, 1)  # 6 cells: 8 x 10 cells -> 2 x 2 tiles
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    single = ksample(comfy, patch(ltxv, sized.resolve((3, 8, 10))), latent, steps=3, cfg=2.0)
    multi = ksample(comfy, patch(ltxv, sized, group=group), latent, steps=3, cfg=2.0)
    err = (multi - single).abs().max().item()
    assert err <= 1e-5, f"{group.rank_count} ranks, tile size config: differs from single process by {err:.3e}"
