"""LTX Sequence Parallel on LTX-Video over ComfyUI's own MultiGPU equals one device within the stated bound.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(n)` makes this CPU machine report cpu, cpu:1 (, cpu:2) to
ComfyUI; the tiny 3-block LTXV (UNETLoader), the deepclones MultiGPU CFG Split builds, the guider's
MultiGPUThreadPool and the pack's dispatch are real. Skipped where ComfyUI has no comfy/multigpu.py (0.3.75).
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import TileCalls, cfg_split, fake_devices, pool_threads
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.sequence import BOUND, LTXV_LAYERS, BlockRows, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")

LAYERS = LTXV_LAYERS


def _latent(seed: int = 2) -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=seed)}  # 240 video tokens


@pytest.mark.parametrize(("n", "cfg"), [(2, 1.0), (3, 1.0), (2, 3.0), (3, 3.0), (4, 3.0)])
def test_devices_equal_one_device(comfy, ltxv3, n, cfg):
    """cfg 1: the tokens in n shards of the whole batch. cfg 3 on 2 devices: one cond each, whole (the cheaper
    layout: no exchange); on 3 devices: 3 shards of the batch of 2; on 4: two groups, each 2 shards of a cond."""
    single = ksample(comfy, ltxv3, _latent(), cfg=cfg)
    calls, rows = TileCalls(), BlockRows()
    with fake_devices(n):
        multi = ksample(comfy, cfg_split(calls.on(sequence(rows.on(ltxv3, LAYERS))), n), _latent(), cfg=cfg)
    err = relative_error(multi, single)
    assert err <= BOUND, f"{n} devices, cfg {cfg}: differs from one device by {err:.3e} (relative), bound {BOUND}"
    assert calls.models() == n, f"{n} devices, cfg {cfg}: the model ran on {calls.models()} models, expected {n}"
    want = {(2, 3.0): {240}, (4, 3.0): {120}}.get((n, cfg), {240 // n})
    assert set(rows.rows) == want, f"{n} devices, cfg {cfg}: blocks ran {sorted(set(rows.rows))} video tokens"
    assert len(rows.rows) == n * LAYERS * 2, f"{len(rows.rows)} block calls, expected {n} devices x {LAYERS} x 2 steps"
    assert not pool_threads(), "a MultiGPU pool thread outlived the sampling run"


def test_the_split_before_the_node_works_the_same(comfy, ltxv3):
    """MultiGPU CFG Split before the node (ComfyUI carries the node's wrappers to the clones when sampling starts)."""
    single = ksample(comfy, ltxv3, _latent(), cfg=1.0)
    rows = BlockRows()
    with fake_devices(2):
        multi = ksample(comfy, sequence(cfg_split(rows.on(ltxv3, LAYERS), 2)), _latent(), cfg=1.0)
    err = relative_error(multi, single)
    assert err <= BOUND, f"split before the node: differs from one device by {err:.3e} (relative), bound {BOUND}"
    assert set(rows.rows) == {120}, f"split before the node: blocks ran {sorted(set(rows.rows))} video tokens"


def test_uneven_speeds_three_devices(comfy, ltxv3):
    """MultiGPU Options' speeds 1 : 2 : 1 give the second device half the tokens; still within the bound."""
    single = ksample(comfy, ltxv3, _latent(), cfg=1.0)
    rows = BlockRows()
    with fake_devices(3):
        multi = ksample(comfy, cfg_split(sequence(rows.on(ltxv3, LAYERS)), 3, {None: 1.0, 1: 2.0, 2: 1.0}),
                        _latent(), cfg=1.0)
    err = relative_error(multi, single)
    assert err <= BOUND, f"uneven speeds: differs from one device by {err:.3e} (relative), bound {BOUND}"
    assert sorted(set(rows.rows)) == [60, 120], f"speeds 1:2:1 over 240 tokens ran blocks of {sorted(set(rows.rows))}"


def test_without_multigpu_clones_the_node_changes_nothing_and_says_so_once(comfy, ltxv3, caplog):
    from ltx_tdp.ltx.sequence import patch

    single = ksample(comfy, ltxv3, _latent(), cfg=3.0)
    patch._said.clear()
    with caplog.at_level("INFO", logger="ltx_tdp"):
        out = ksample(comfy, sequence(ltxv3), _latent(), cfg=3.0)
    assert torch.equal(out, single), f"one device: differs by {(out - single).abs().max():.3e}"
    assert caplog.text.count("no MultiGPU clones") == 1, f"expected one log line saying so:\n{caplog.text}"


@pytest.mark.parametrize("sampler", ["dpmpp_2m", "res_multistep"])
def test_other_samplers_equal_one_device(comfy, ltxv3, sampler):
    """Samplers differ only in how they combine model calls; each call is sharded as with euler."""

    def run(model) -> torch.Tensor:
        from ltx_tdp_devkit.ltx_helpers import conditioning

        (out,) = comfy.run_node("KSampler", model=model, seed=3, steps=3, cfg=1.0, sampler_name=sampler,
                                scheduler="simple", positive=conditioning(1), negative=conditioning(2),
                                latent_image=_latent(), denoise=0.6)
        return out["samples"]

    single = run(ltxv3)
    with fake_devices(2):
        multi = run(cfg_split(sequence(ltxv3), 2))
    err = relative_error(multi, single)
    assert err <= BOUND, f"{sampler}: differs from one device by {err:.3e} (relative), bound {BOUND}"


def test_guides_and_a_keyframe_equal_one_device(comfy, ltxv3, vae):
    """LTXV with an IC-LoRA guide (attention mask, strength 0.8) and a keyframe, through ComfyUI's LTXVAddGuide:
    guide tokens at the end of the sequence, a per-token timestep (`vec`) and the guide attention mask, all cut
    to the shards. 3 devices, cfg 3."""
    from ltx_tdp_devkit.ltx_helpers import add_iclora_guides, conditioning

    pos, neg, latent = add_iclora_guides(comfy, vae, _latent(), conditioning(1), conditioning(2))
    kw = dict(cfg=3.0, positive=pos, negative=neg)
    single = ksample(comfy, ltxv3, latent, **kw)
    rows = BlockRows()
    with fake_devices(3):
        multi = ksample(comfy, cfg_split(sequence(rows.on(ltxv3, LAYERS)), 3), latent, **kw)
    err = relative_error(multi, single)
    assert err <= BOUND, f"LTXV with guides: differs from one device by {err:.3e} (relative), bound {BOUND}"
    assert max(rows.rows) < 240, f"240 video tokens and the guides' were not sharded: {sorted(set(rows.rows))}"
