"""What ComfyUI is asked for by a TDP model: the memory of its largest tile plus the pack's own buffers, not the
whole frame's. Checked with ComfyUI's own code: `comfy.sampler_helpers.estimate_memory` as `_prepare_sampling`
calls it (before the clone is loaded, and again once it is), compared with the same estimate for a tile-sized
latent on the unpatched model; and `_calc_cond_batch`, which runs cond and uncond as one batch only when its
memory test passes.

Mocked in the batching test only: the free memory ComfyUI sees (`ModelPatcher.get_free_memory`, or on older
ComfyUI `comfy.model_management.get_free_memory`), set between what a tile batch and a whole-frame batch need,
as on a card where only the first fits.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.estimates import (comfyui_estimate, pack_buffers, record_estimates, record_tile_batches,
                                      within_one_cell)
from ltx_tdp_devkit.ltx_helpers import conditioning, ksample, load_ltxv, randn, tdp_2x2

LATENT = (1, 128, 2, 32, 32)
TILE = (1, 128, 2, 17, 17)
"""2 x 2 tiles with overlap 2 on 32 x 32: [0, 17) and [15, 32) on each axis."""


@pytest.fixture(scope="module")
def ltxv(comfy, model_names):
    return load_ltxv(comfy, model_names)


def test_comfyui_sizes_a_tdp_run_by_its_largest_tile_plus_the_packs_buffers(comfy, ltxv):
    model = tdp_2x2(ltxv)
    seen = record_estimates(model)
    latent = {"samples": randn(*LATENT, seed=1)}
    for _ in range(2):  # the first run estimates before the clone is loaded, the second with it loaded
        ksample(comfy, model, latent, steps=1, cfg=3.0)
    tile, full = comfyui_estimate(ltxv, TILE), comfyui_estimate(ltxv, LATENT)
    buffers = pack_buffers(2, torch.Size(LATENT).numel(), torch.Size(TILE).numel())
    for run, (shape, asked, _minimum) in enumerate(seen, start=1):
        assert within_one_cell(asked, tile, buffers, TILE), (
            f"run {run}: ComfyUI was asked for {asked / 2**20:.2f} MiB (noise shape {shape}); the largest tile needs "
            f"{tile / 2**20:.2f} MiB, the pack's buffers {buffers / 2**20:.2f} MiB, the whole frame {full / 2**20:.2f}")
        assert asked < 0.75 * full, f"run {run}: asked {asked / full:.2f} x the whole frame's estimate"
    assert len(seen) == 2, f"{len(seen)} sampling runs recorded"


@pytest.mark.parametrize("order", ["cache_then_tdp", "tdp_then_cache"])
def test_with_a_step_cache_the_whole_frames_input_it_keeps_is_counted_too(comfy, ltxv, order):
    """EasyCache runs once around the split call (ltx.model.step_cache), holding the whole frame's input in the
    inference dtype while the tiles run: the estimate is the tile's plus the pack's buffers plus that input."""
    from ltx_tdp_devkit.step_caches import cached

    model = tdp_2x2(cached(comfy, ltxv, "EasyCache")) if order == "cache_then_tdp" else cached(comfy, tdp_2x2(ltxv),
                                                                                                 "EasyCache")
    seen = record_estimates(model)
    ksample(comfy, model, {"samples": randn(*LATENT, seed=1)}, steps=1, cfg=3.0)
    tile = comfyui_estimate(ltxv, TILE)
    frame = torch.Size(LATENT).numel()
    buffers = pack_buffers(2, frame, torch.Size(TILE).numel()) + 2 * frame * torch.float32.itemsize
    ((shape, asked, _minimum),) = seen
    assert within_one_cell(asked, tile, buffers, TILE), (
        f"{order}: ComfyUI was asked for {asked / 2**20:.2f} MiB (noise shape {shape}); the largest tile needs "
        f"{tile / 2**20:.2f} MiB, the pack's buffers with the cache's input {buffers / 2**20:.2f} MiB")


def test_an_ltx2_audio_video_run_is_sized_by_its_largest_tile(comfy, ltxav):
    from ltx_tdp_devkit.ltx_helpers import randn as noise

    video, audio = noise(*LATENT, seed=1), noise(1, 8, 5, 16, seed=2)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": video},
                               audio_latent={"samples": audio, "type": "audio"})
    model = tdp_2x2(ltxav)
    seen = record_estimates(model)
    context = 2 * 16  # the tiny LTXAV's text context width
    ksample(comfy, model, latent, steps=1, cfg=3.0, denoise=0.4, positive=conditioning(1, dim=context),
            negative=conditioning(2, dim=context))
    packed = lambda video_shape: (1, 1, torch.Size(video_shape[1:]).numel() + audio[0].numel())  # noqa: E731
    tile, full = comfyui_estimate(ltxav, packed(TILE)), comfyui_estimate(ltxav, packed(LATENT))
    ((shape, asked, _),) = seen
    assert shape[:2] == [1, 1] and tile < asked < 0.75 * full, (
        f"asked {asked / 2**20:.2f} MiB for packed shape {shape}: the largest tile needs {tile / 2**20:.2f} MiB, "
        f"the whole frame {full / 2**20:.2f} MiB")


def test_cond_and_uncond_run_as_one_batch_where_a_tile_batch_fits(comfy, ltxv, monkeypatch):
    from comfy import model_management, model_patcher
    from comfy import patcher_extension as ext

    model = tdp_2x2(ltxv)
    batches = record_tile_batches(model)
    full_batch = ltxv.model.memory_required([2, *LATENT[1:]])
    free = 1.5 * full_batch * 0.9  # the whole frame's batch does not fit, a tile batch does
    if hasattr(model_patcher.ModelPatcher, "get_free_memory"):
        monkeypatch.setattr(model_patcher.ModelPatcher, "get_free_memory", lambda self, device: free)
    else:
        monkeypatch.setattr(model_management, "get_free_memory", lambda *a, **k: free)
    asked = []
    model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_asked", lambda executor, x, *a, **k: (
        asked.append(model.model.memory_required([2, *LATENT[1:]])) or executor(x, *a, **k)))
    ksample(comfy, model, {"samples": randn(*LATENT, seed=1)}, steps=1, cfg=3.0)
    assert batches and set(batches) == {2}, \
        f"tile calls ran with batches {batches}: cond and uncond were not batched though a tile batch fits"
    assert asked[0] * 1.5 < free, f"the tile batch ({asked[0] / 2**20:.2f} MiB x 1.5) does not fit {free / 2**20:.2f} MiB"


def test_a_group_warns_only_about_wrappers_that_run_per_tile(comfy, caplog):
    """The memory hooks (and any pack's sampling-level wrappers) run once on rank 0, as without a group: the
    warning that other packs' wrappers run on rank 0's tiles only names APPLY_MODEL / DIFFUSION_MODEL ones."""
    import logging

    from ltx_tdp.ltx.model.job import plain_options
    from ltx_tdp.ltx.model.memory import MEMORY_KEY

    wrappers = {"outer_sample": {MEMORY_KEY: [print]}, "prepare_sampling": {MEMORY_KEY: [print]},
                "apply_model": {"ltx_tdp": [print], "tdp_test_other_pack": [print]}}
    with caplog.at_level(logging.WARNING):
        plain_options({"wrappers": wrappers}, "ltx_tdp")
    named = [r.getMessage() for r in caplog.records if "tiles only" in r.getMessage()]
    assert len(named) == 1 and "tdp_test_other_pack" in named[0] and MEMORY_KEY not in named[0], named


def test_a_tile_is_sized_with_every_guide_frame_it_can_keep(comfy, ltxv):
    """A latent with a guide frame appended (LTXVAddGuide): the tiles are planned on the video frames and the
    tile's input holds the guide frames too (at most all of them), as ComfyUI's cond batching names them."""
    model = tdp_2x2(ltxv)
    memory = model.object_patches["memory_required"]
    memory.latent_shapes = [(1, 128, 3, 32, 32)]  # inside a run of this model (its OUTER_SAMPLE wrapper sets it)
    try:
        shape, extra = memory.layout([2, 128, 3, 32, 32], guide_tokens=32 * 32)
        asked = memory([2, 128, 3, 32, 32], {"keyframe_idxs": [torch.Size([1, 3, 32 * 32, 2])]})
    finally:
        memory.latent_shapes = None
    assert shape == [2, 128, 3, 17, 17], f"the largest tile's input with its guide frame: {shape}"
    tile = type(ltxv.model).memory_required(ltxv.model, shape)
    assert asked == tile + extra and extra == pack_buffers(2, 128 * 3 * 32 * 32, 128 * 2 * 17 * 17) + \
        2 * 128 * 17 * 17 * 4, f"asked {asked}, tile {tile}, the pack's bytes {extra}"
    assert memory([2, 128, 3, 32, 32]) == type(ltxv.model).memory_required(ltxv.model, [2, 128, 3, 32, 32]), \
        "outside a run of this model (between runs) ComfyUI's own estimate must stand"


def test_asked_with_a_keyword_newer_comfyui_passes_the_estimate_is_still_the_largest_tiles(comfy, ltxv):
    """Newer ComfyUI asks `memory_required(shape, cond_shapes=..., memory_efficient_attention=...)`. Asked that way
    during a run (a probe inside the sampling, where ComfyUI's cond batching asks), the pack's object patch answers
    what it answers without the keyword: the largest tile's estimate plus the pack's buffers, never a TypeError.
    ComfyUI 0.33's own formula takes no such keyword, so the pack drops it there."""
    import comfy.patcher_extension as ext

    model = tdp_2x2(ltxv)
    asked: list[tuple[float, float]] = []

    def probe(executor, *args, **kwargs):
        memory = model.model.memory_required
        shape, conds = list(LATENT), {"c_crossattn": (1, 8, 16)}
        asked.append((memory(shape, cond_shapes=conds), memory(shape, cond_shapes=conds,
                                                                memory_efficient_attention=True)))
        return executor(*args, **kwargs)

    model.add_wrapper_with_key(ext.WrappersMP.PREDICT_NOISE, "tdp_test_memory_keyword", probe)
    ksample(comfy, model, {"samples": randn(*LATENT, seed=1)}, steps=1)
    assert asked, "the probe never ran"
    plain, with_keyword = asked[0]
    assert with_keyword == plain, f"asked with the keyword: {with_keyword}, without: {plain}"
    whole = type(ltxv.model).memory_required(ltxv.model, list(LATENT), cond_shapes={"c_crossattn": (1, 8, 16)})
    assert plain < 0.75 * whole, f"the object patch answered {plain / whole:.2f} x the whole frame's estimate"


def test_a_keyword_the_models_formula_takes_is_passed_on():
    """A stand-in for a newer BaseModel whose formula takes `memory_efficient_attention`: outside a run the object
    patch is that formula, the keyword included; a keyword it does not take is dropped."""
    from ltx_tdp.ltx.model.memory import TileMemory

    class NewerModel:
        def memory_required(self, input_shape, cond_shapes={}, memory_efficient_attention=False):  # noqa: B006
            return 2.0 if memory_efficient_attention else 3.0

    memory = TileMemory(settings=None, base_model=NewerModel())
    assert memory([1, 128, 2, 8, 8], {}, memory_efficient_attention=True) == 2.0
    assert memory([1, 128, 2, 8, 8], {}) == 3.0
    assert memory([1, 128, 2, 8, 8], {}, a_keyword_from_the_future=1) == 3.0
