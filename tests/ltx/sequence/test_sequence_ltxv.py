"""LTX Sequence Parallel on LTX-Video over ComfyUI's own MultiGPU equals one device within fp32 rounding.

HARDWARE MOCK: `ltx_tdp_devkit.core_multigpu.fake_devices(n)` makes this CPU machine report cpu, cpu:1 (, cpu:2) to
ComfyUI; the tiny LTXV (UNETLoader), the deepclones MultiGPU CFG Split builds, the guider's MultiGPUThreadPool and
the pack's dispatch are real. Skipped where ComfyUI has no comfy/multigpu.py (0.3.75).
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.core_multigpu import (SKIP_REASON, TileCalls, cfg_split, fake_devices, has_core_multigpu,
                                         pool_threads, torch_threads)
from ltx_tdp_devkit.ltx_helpers import ksample, load_ltxv, randn

BOUND = 1e-5
"""Largest |sharded - one device| allowed, relative to the output's largest magnitude (docs/sequence-parallel.md)."""


@pytest.fixture(scope="module")
def ltxv(comfy, model_names):
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    return load_ltxv(comfy, model_names)


@pytest.fixture(autouse=True)
def one_torch_thread():
    with torch_threads(1):
        yield


def sequence(model):
    from ltx_tdp.ltx.sequence import apply_sequence_parallel

    return apply_sequence_parallel(model)


class BlockRows:
    """A ("double_block", i) replace set on the model before the node (as another pack's would be): records how many
    video tokens each block call gets, then runs the block."""

    def __init__(self):
        self.rows: list[int] = []

    def __call__(self, args, extra):
        img = args["img"]
        self.rows.append(int((img[0] if isinstance(img, tuple) else img).shape[1]))
        return extra["original_block"](args)

    def on(self, model, blocks: int = 2):
        m = model.clone()
        for i in range(blocks):
            m.set_model_patch_replace(self, "dit", "double_block", i)
        return m


def _latent(seed: int = 2) -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=seed)}


def relative_error(multi: torch.Tensor, single: torch.Tensor) -> float:
    return ((multi - single).abs().max() / single.abs().max()).item()


@pytest.mark.parametrize("cfg", [1.0, 3.0])
@pytest.mark.parametrize("n", [2, 3])
def test_devices_equal_one_device(comfy, ltxv, n, cfg):
    single = ksample(comfy, ltxv, _latent(), cfg=cfg)
    calls, rows = TileCalls(), BlockRows()
    with fake_devices(n):
        multi = ksample(comfy, cfg_split(calls.on(sequence(rows.on(ltxv))), n), _latent(), cfg=cfg)
    print("ROWS", sorted(set(rows.rows)))
    err = relative_error(multi, single)
    print("ERR", n, cfg, err, (multi-single).abs().max().item())
    assert err <= BOUND, f"{n} devices, cfg {cfg}: differs from one device by {err:.3e} (relative), bound {BOUND}"
    assert calls.models() == n, f"{n} devices, cfg {cfg}: the model ran on {calls.models()} models"
    assert not pool_threads()
