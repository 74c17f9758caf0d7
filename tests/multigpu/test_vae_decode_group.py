"""The tiled VAE decode over a group gives the single-process decode: the tiles go round-robin to the ranks,
the window-weighted partial sums reduce to rank 0, a new VAE reaches the workers, an interrupt keeps the
group serving, and a worker killed mid-decode fails the decode in time with its rank named."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import load_vae, randn
from ltx_tdp_devkit.vae_helpers import plan, tiled

pytestmark = pytest.mark.distributed

LAYOUTS = {
    # name (tile counts frames x height x width): latent (frames, height, width), decode settings
    "2x2x2-tiles": ((4, 4, 4), dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8, context=1)),
    "1x1x2-tiles": ((2, 2, 6), dict(spatial_tile=128, spatial_overlap=32, temporal_tile=4096, temporal_overlap=0,
                                    context=1)),
}
COUNTS = {"2x2x2-tiles": (2, 2, 2), "1x1x2-tiles": (1, 1, 2)}
LIMIT = 1e-6
_singles: dict = {}


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def group(request, comfy, group_factory):
    g = group_factory(request.param)
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def vae(comfy, model_names):
    return load_vae(model_names)


def _tiny_vae(seed: int, dtype=None, **config):
    """Another tiny LTX VAE (ComfyUI's own comfy.sd.VAE) with weights from `seed` and config overrides."""
    import comfy.sd
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    from ltx_tdp_devkit import tiny_models

    cfg = {**tiny_models.VAE_CONFIG, **config}
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for key, t in VideoVAE(config=cfg).state_dict().items():
        if key.endswith("std-of-means"):
            sd[key] = torch.ones_like(t)
        elif key.endswith("mean-of-means"):
            sd[key] = torch.zeros_like(t)
        else:
            sd[key] = (torch.randn(t.shape, generator=gen) * 0.1).to(t.dtype) if t.is_floating_point() else t
    return comfy.sd.VAE(sd=sd, metadata={"config": json.dumps({"vae": cfg})}, dtype=dtype)


def _single(vae, x, **kw) -> torch.Tensor:
    """The single-process decode (computed once per VAE, latent and settings in this module)."""
    key = (id(vae), x.shape, x.sum().item(), tuple(sorted(kw.items())))
    if key not in _singles:
        _singles[key] = tiled(vae, x, **kw)
    return _singles[key]


def _over(group, vae, x, progress=None, **kw) -> torch.Tensor:
    return tiled(vae, x, group=group, progress=progress, **kw)


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUTS.keys())
def test_decode_over_the_group_equals_the_single_process_decode(vae, group, layout):
    shape, settings = LAYOUTS[layout]
    x = randn(1, 128, *shape, seed=1)
    layout_plan = plan(vae, x, **settings)
    assert layout_plan.pixels.counts == COUNTS[layout], f"tile counts {layout_plan.pixels.counts}"
    n_tiles = len(layout_plan.pixels.tiles)
    reports: list[tuple[int, int]] = []
    multi = _over(group, vae, x, progress=lambda done, total: reports.append((done, total)), **settings)
    single = _single(vae, x, **settings)
    assert multi.shape == single.shape, f"shape {tuple(multi.shape)} != {tuple(single.shape)}"
    err = (multi - single).abs().max().item()
    assert err <= LIMIT, f"{group.rank_count} ranks, {layout}: frames differ by {err:.3e} (limit {LIMIT:.0e})"
    share = len(range(0, n_tiles, group.rank_count))
    assert len(reports) == share + 1 and reports[-1] == (n_tiles, n_tiles), (
        f"rank 0 reported {reports}; it decodes {share} of {n_tiles} tiles, then reports the whole decode")


def test_a_new_vae_reaches_the_workers_and_the_old_one_comes_back(vae, group_factory):
    group = group_factory(2)
    shape, settings = LAYOUTS["1x1x2-tiles"]
    x = randn(1, 128, *shape, seed=2)
    other = _tiny_vae(seed=1)
    first = _over(group, vae, x, **settings)
    second = _over(group, other, x, **settings)
    err = (second - _single(other, x, **settings)).abs().max().item()
    assert err <= LIMIT, f"the second VAE over 2 ranks differs from single-process by {err:.3e}"
    changed = (second - first).abs().max().item()
    assert changed > 1e-2, f"the second VAE changed the frames by only {changed:.3e}"
    again = _over(group, vae, x, **settings)
    err_back = (again - first).abs().max().item()
    assert err_back <= LIMIT, f"the first VAE again differs from its first decode by {err_back:.3e}"


@pytest.mark.slow
def test_a_worker_sends_each_tile_raw_in_the_vaes_dtype_into_one_receive_buffer_at_a_time(comfy, group_factory):
    """Rank 0 receives a worker's tile as its decoder gave it (bf16 here: half the bytes of the processed fp32
    tile), one tile's buffer at a time, and processes and weighs it as it does its own.

    `slow`: ComfyUI 0.3.x runs a bf16 VAE's 3-d convolutions on a CPU through torch's reference GEMM (a tiny
    decode 16 times its fp32 time, 65 times ComfyUI 0.33's bf16), over 15 minutes here; CI runs it on 0.33.0."""
    group = group_factory(2)
    half = _tiny_vae(seed=3, dtype=torch.bfloat16)
    shape, settings = LAYOUTS["2x2x2-tiles"]
    x = randn(1, 128, *shape, seed=6)
    group.session().stats["receive_bytes"] = 0  # the largest so far: earlier tests' fp32 VAE used this group
    multi = _over(group, half, x, **settings)
    err = (multi - _single(half, x, **settings)).abs().max().item()
    assert err <= LIMIT, f"bf16 VAE: 2 ranks differ from single-process by {err:.3e}"
    largest = max(math.prod(t.shape) for t in plan(half, x, **settings).pixels.tiles_for_rank(1, 2))  # the worker's
    received = group.session().stats["receive_bytes"]
    assert received == 3 * largest * 2, f"rank 0's receive buffer held {received} bytes; a bf16 tile, {3 * largest * 2}"


def test_a_timestep_conditioned_vae_gives_every_rank_the_same_decode_noise(group_factory):
    group = group_factory(2)
    noisy = _tiny_vae(seed=7, timestep_conditioning=True)
    shape, settings = LAYOUTS["1x1x2-tiles"]  # the overlap blends rank 0's tile with rank 1's
    x = randn(1, 128, *shape, seed=3)
    multi = _over(group, noisy, x, seed=5, **settings)
    err = (multi - _single(noisy, x, seed=5, **settings)).abs().max().item()
    assert err <= LIMIT, f"noise seed 5: 2 ranks differ from single-process by {err:.3e}"


def test_an_interrupt_during_the_decode_stops_every_rank_and_the_group_keeps_serving(vae, group_factory):
    import comfy.model_management as mm

    group = group_factory(2)
    session = group.session()
    shape, settings = LAYOUTS["2x2x2-tiles"]
    x = randn(1, 128, *shape, seed=1)

    def interrupt(done: int, total: int) -> None:
        mm.interrupt_current_processing(True)

    try:
        with pytest.raises(mm.InterruptProcessingException):
            _over(group, vae, x, progress=interrupt, **settings)
    finally:
        mm.interrupt_current_processing(False)
    assert group.session() is session and not session.closed, "the interrupt tore the group down"
    err = (_over(group, vae, x, **settings) - _single(vae, x, **settings)).abs().max().item()
    assert err <= LIMIT, f"the decode after the interrupt differs from single-process by {err:.3e}"


def test_a_worker_killed_during_the_decode_fails_it_naming_the_rank_and_the_next_decode_works(
        vae, group_factory, live_workers):
    import os
    import signal

    from ltx_tdp.multigpu.settings import TDPGroupError

    group = group_factory(2, timeout_s=60.0)
    session = group.session()
    victim = session.procs[1].pid
    shape, settings = LAYOUTS["2x2x2-tiles"]
    x = randn(1, 128, *shape, seed=1)
    hit: list[int] = []

    def kill_rank_1(done: int, total: int) -> None:
        if not hit:
            os.kill(victim, signal.SIGKILL)
            hit.append(done)

    with pytest.raises(TDPGroupError) as failure:
        _over(group, vae, x, progress=kill_rank_1, **settings)
    message = str(failure.value)
    assert "rank 1" in message and "was killed by SIGKILL" in message, message
    assert session.stats["timeouts"] == 0, \
        f"rank 0 waited out {session.stats['timeouts']} timeouts before seeing the killed worker (expected 0)"
    assert not live_workers(), f"worker processes left after the failure: {live_workers()}"
    err = (_over(group, vae, x, **settings) - _single(vae, x, **settings)).abs().max().item()
    assert err <= LIMIT, f"the decode after the failure differs from single-process by {err:.3e}"
    assert group.session().procs[1].pid != victim, "the next decode did not start a fresh worker"
