"""Core's step caches with the TDP patcher: the cache decides and reuses once per step, on the whole frame.

The check that tells a per-tile cache from a whole-frame one: a tiny LTXV whose attention output projections are
zeroed (every token depends on itself alone), on which a 2 x 2 TDP run equals the untiled run within fp32
rounding. A cache that ran per tile would compare one tile with another and add one tile's residual to another
(measured before the fix: 2.05 x the latent's max |value|). With the fix, TDP + cache equals untiled + cache at
every step, with the same number of skipped steps, the cache before or after the patcher.
"""

from __future__ import annotations

import threading

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, torch_threads
from ltx_tdp_devkit.core_multigpu_fixtures import core_multigpu  # noqa: F401 (fixture)
from ltx_tdp_devkit.ltx_helpers import patch, randn, tdp_2x2, tiling
from ltx_tdp_devkit.step_caches import CACHES, cached, sample, sample_latent, tokenwise_ltxv

BOUND = 1e-5
"""Largest step difference (relative to the latents' max |value|) of TDP + cache against untiled + cache on the
tokenwise model: the blend's fp32 rounding (measured: about 1e-7), never a mixed-up residual (order 1)."""


@pytest.fixture(scope="module")
def tokenwise(comfy, comfy_base):
    return tokenwise_ltxv(comfy, comfy_base)


@pytest.fixture(scope="module")
def latent():
    return randn(1, 128, 3, 8, 10, seed=4)


def _cache_node(comfy, kind):
    try:
        comfy.node_class(kind)
    except KeyError:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {kind} node")


def test_tdp_2x2_equals_untiled_on_the_tokenwise_model_without_a_cache(comfy, tokenwise, latent):
    untiled = sample(comfy, tokenwise, latent)
    tiled = sample(comfy, tdp_2x2(tokenwise), latent)
    assert tiled.max_step_diff(untiled) <= BOUND, "the tokenwise model is not tile-independent: the check below " \
                                                  "could not tell a per-tile cache from a whole-frame one"


@pytest.mark.parametrize("order", ["cache_then_tdp", "tdp_then_cache"])
@pytest.mark.parametrize("kind", CACHES)
def test_tdp_with_a_step_cache_equals_the_untiled_cached_run_step_for_step(comfy, tokenwise, latent, kind, order):
    _cache_node(comfy, kind)
    untiled = sample(comfy, cached(comfy, tokenwise, kind), latent)
    model = tdp_2x2(cached(comfy, tokenwise, kind)) if order == "cache_then_tdp" else cached(comfy, tdp_2x2(tokenwise), kind)
    tiled = sample(comfy, model, latent)
    assert untiled.skipped, f"{kind} skipped no step of the untiled run: the test shows nothing"
    assert tiled.skipped == untiled.skipped, f"{kind}, {order}: skipped {tiled.skipped} steps, untiled {untiled.skipped}"
    diff = tiled.max_step_diff(untiled)
    assert diff <= BOUND, f"{kind}, {order}: a step differs from the untiled cached run by {diff:.3e} (relative)"


@pytest.mark.parametrize("kind", CACHES)
def test_a_cached_run_skips_and_differs_from_the_uncached_one(comfy, tokenwise, latent, kind):
    """The cache really acts through the pack: its skipped steps change the result (else the equality above
    would hold for a cache that never ran)."""
    _cache_node(comfy, kind)
    plain = sample(comfy, tdp_2x2(tokenwise), latent)
    with_cache = sample(comfy, tdp_2x2(cached(comfy, tokenwise, kind)), latent)
    assert with_cache.skipped and with_cache.skipped > 0
    change = float((with_cache.final - plain.final).abs().max() / plain.final.abs().max())
    assert change > 1e-3, f"{kind} skipped steps but changed nothing ({change:.1e})"


def test_one_tile_with_easycache_equals_easycache_alone_within_rounding(comfy, tokenwise, latent):
    """1 x 1 tiling with EasyCache: every step the cache runs is the unpatched model's, bit for bit; a skipped step
    adds a residual the pack recovers from the tile's x0 (float64), so equal within fp32 rounding."""
    _cache_node(comfy, "EasyCache")
    alone = sample(comfy, cached(comfy, tokenwise, "EasyCache"), latent)
    one_tile = sample(comfy, patch(cached(comfy, tokenwise, "EasyCache"), tiling()), latent)
    assert one_tile.skipped == alone.skipped and alone.skipped
    assert torch.equal(one_tile.steps[0], alone.steps[0]), "the first step (never skipped) is not bit-identical"
    assert one_tile.max_step_diff(alone) <= BOUND


@pytest.mark.parametrize("kind", CACHES)
def test_tiles_over_two_devices_with_a_step_cache_equal_one_device_bit_for_bit(comfy, core_multigpu, tokenwise,
                                                                             latent, kind):
    """TDP's tiles over ComfyUI's MultiGPU clones (2 presented devices) with the cache: the cache still runs once
    per step on the main thread, around every device's tiles, and the result is one device's, bit for bit.

    HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu, cpu:1; core's deepclones, its MultiGPU thread pool
    and the pack's dispatch are real."""
    _cache_node(comfy, kind)
    one = sample(comfy, tdp_2x2(cached(comfy, tokenwise, kind)), latent)
    with torch_threads(1), fake_devices(2):
        two = sample(comfy, cfg_split(tdp_2x2(cached(comfy, tokenwise, kind)), 2), latent)
    assert two.skipped == one.skipped and one.skipped
    assert torch.equal(two.final, one.final), f"{kind}: differs by {(two.final - one.final).abs().max():.3e}"


class CacheThreads:
    """Records the thread of every call of a model's EasyCache wrapper: the node's own wrapper, re-registered under
    its key on a clone (ComfyUI's public wrapper API) behind a recorder that calls it unchanged."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.lock = threading.Lock()

    def on(self, model):
        import comfy.patcher_extension as ext

        m = model.clone()
        originals = list(m.get_wrappers(ext.WrappersMP.DIFFUSION_MODEL, "easycache"))
        assert originals, "EasyCache registered no diffusion-model wrapper under 'easycache'"
        m.remove_wrappers_with_key(ext.WrappersMP.DIFFUSION_MODEL, "easycache")
        for original in originals:
            m.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "easycache", self.recording(original))
        return m

    def recording(self, original):
        def wrapper(executor, *args, **kwargs):
            with self.lock:
                self.threads.append(threading.get_ident())
            return original(executor, *args, **kwargs)

        return wrapper


def test_over_two_devices_easycache_runs_in_the_sampler_thread_only_once_per_model_call(comfy, core_multigpu,
                                                                                        tokenwise, latent):
    """The cache's state (its residuals, its skip decision) is written by one thread: the sampler's, once per
    model call. Run per tile, the two devices' threads would each call it (measured before the fix: 2 threads,
    4 calls per model call).

    HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu, cpu:1; core's pool threads are real."""
    _cache_node(comfy, "EasyCache")
    probe = CacheThreads()
    with torch_threads(1), fake_devices(2):
        run = sample(comfy, cfg_split(tdp_2x2(probe.on(cached(comfy, tokenwise, "EasyCache"))), 2), latent)
    assert run.skipped, "EasyCache skipped no step: the test shows nothing"
    assert set(probe.threads) == {threading.get_ident()}, (
        f"EasyCache ran in {len(set(probe.threads))} threads, not only the sampler's")
    assert len(probe.threads) == len(run.steps), (
        f"EasyCache ran {len(probe.threads)} times in {len(run.steps)} steps (one model call each, both conds)")


def _av_latent(comfy) -> tuple[dict, torch.Tensor]:
    video, audio = randn(1, 128, 2, 8, 8, seed=1), randn(1, 8, 5, 16, seed=2)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": video},
                               audio_latent={"samples": audio, "type": "audio"})
    return latent, audio


def _sample_av(comfy, model, latent: dict) -> tuple[torch.Tensor, torch.Tensor, int | None]:
    from ltx_tdp_devkit.ltx_helpers import conditioning

    recorded = sample_latent(comfy, model, latent, positive=conditioning(1, dim=32), negative=conditioning(2, dim=32))
    video, audio = recorded.final.unbind()  # ComfyUI's NestedTensor(video, audio)
    return video, audio, recorded.skipped


@pytest.mark.ltx2
def test_ltx2_one_tile_with_easycache_equals_easycache_alone(comfy, ltxav):
    """LTX-2's packed (video, audio) latent: the cache sees the [video, audio] pair the diffusion model gets, as
    without the pack (1 x 1 tiling, average audio mode, which is the unpatched model bit for bit)."""
    _cache_node(comfy, "EasyCache")
    latent, _ = _av_latent(comfy)
    video, audio, skipped = _sample_av(comfy, cached(comfy, ltxav, "EasyCache"), latent)
    tiled_video, tiled_audio, tiled_skipped = _sample_av(
        comfy, patch(cached(comfy, ltxav, "EasyCache"), tiling(), audio_mode="average"), latent)
    assert skipped and tiled_skipped == skipped, (tiled_skipped, skipped)
    for name, got, want in (("video", tiled_video, video), ("audio", tiled_audio, audio)):
        err = float((got - want).abs().max() / want.abs().max())
        assert err <= BOUND, f"{name} differs from EasyCache alone by {err:.3e} (relative)"


@pytest.mark.ltx2
def test_ltx2_held_audio_leaves_a_cached_tdp_stage_bit_for_bit(comfy, ltxav):
    _cache_node(comfy, "EasyCache")
    latent, audio = _av_latent(comfy)
    _, out_audio, skipped = _sample_av(comfy, tdp_2x2(cached(comfy, ltxav, "EasyCache")), latent)
    assert skipped, "EasyCache skipped no step"
    assert torch.equal(out_audio, audio), "held mode with EasyCache changed the stage's audio"


@pytest.mark.parametrize("prediction", ["EPS", "V_PREDICTION", "CONST"])
def test_the_model_output_is_recovered_from_the_denoised_value(comfy, prediction):
    """`model_output_from_denoised` inverts ComfyUI's own `calculate_denoised` for every prediction type."""
    import comfy.model_sampling as ms

    from ltx_tdp.ltx.model.step_cache import model_output_from_denoised

    sampling = type("Sampling", (getattr(ms, prediction),), {"sigma_data": 1.0})()
    sigma = torch.tensor([0.7, 0.2])
    x, output = randn(2, 4, 3, 5, seed=1), randn(2, 4, 3, 5, seed=2)
    denoised = sampling.calculate_denoised(sigma, output, x)
    recovered = model_output_from_denoised(sampling, sigma, x, denoised)
    assert torch.allclose(recovered, output, rtol=1e-5, atol=1e-5), (recovered - output).abs().max()


def test_without_step_caches_leaves_the_callers_options_alone():
    from ltx_tdp.ltx.model.step_cache import step_cache_wrappers, without_step_caches

    cache, other = object(), object()
    options = {"wrappers": {"diffusion_model": {"easycache": [cache], "other": [other]}, "apply_model": {}}}
    inner = without_step_caches(options)
    assert step_cache_wrappers(options) == [cache] and step_cache_wrappers(inner) == []
    assert inner["wrappers"]["diffusion_model"] == {"other": [other]}
    assert options["wrappers"]["diffusion_model"] == {"easycache": [cache], "other": [other]}
