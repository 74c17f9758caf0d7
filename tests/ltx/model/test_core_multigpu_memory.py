"""Memory of TDP over ComfyUI's in-process MultiGPU: each device sums its work units into one full-frame float64
accumulator (the running total is passed in, not a new buffer per unit), and ComfyUI's estimate, which it applies
to every device it loads a clone on, counts what each device holds: that accumulator and, on the other devices,
their copy of the call's inputs.

HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu and cpu:1 (see `ltx_tdp_devkit.core_multigpu`);
the tiny LTXV, core's deepclones, its MultiGPUThreadPool and ComfyUI's estimate are real.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.estimates import comfyui_estimate, pack_buffers, record_estimates, within_one_cell
from ltx_tdp_devkit.ltx_helpers import ksample, randn, tdp_2x2

LATENT = (1, 128, 2, 32, 32)
TILE = (1, 128, 2, 17, 17)
"""2 x 2 tiles with overlap 2 on 32 x 32: [0, 17) and [15, 32) on each axis."""


class _FullFrameBuffers(TorchDispatchMode):
    """The most float64 tensors of at least `numel` elements (full-frame accumulators) alive at once, counted by
    storage in the thread that enters it (a dispatch mode is per thread: here the sampler's, this device's)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.peak = numel, 0
        self._live: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel() >= self.numel:
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self._live:
                    self._live.add(key)
                    self.peak = max(self.peak, len(self._live))
                    weakref.finalize(storage, self._live.discard, key)
        return out


def test_each_device_sums_its_units_into_one_accumulator_and_equals_one_device(comfy, ltxv):
    """4 tiles a call, 2 per device: this device's 2 units go into one full-frame float64 buffer."""
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    single = ksample(comfy, tdp_2x2(ltxv), latent, steps=2)
    buffers = _FullFrameBuffers(128 * 3 * 8 * 10)
    with fake_devices(2):
        model = cfg_split(tdp_2x2(ltxv), 2)
        with buffers:
            multi = ksample(comfy, model, latent, steps=2)
    assert buffers.peak == 1, f"{buffers.peak} full-frame float64 accumulators were alive at once on this device"
    assert torch.equal(multi, single), f"two devices differ from one by {(multi - single).abs().max():.3e}"


def test_the_estimate_counts_each_devices_accumulator_and_input_copy(comfy, ltxv):
    with fake_devices(2):
        model = cfg_split(tdp_2x2(ltxv), 2)
        seen = record_estimates(model)
        ksample(comfy, model, {"samples": randn(*LATENT, seed=1)}, steps=1, cfg=3.0)
    tile = comfyui_estimate(ltxv, TILE)
    buffers = pack_buffers(2, torch.Size(LATENT).numel(), torch.Size(TILE).numel(), other_devices=True)
    assert seen, "no sampling run was estimated"
    for shape, asked, _minimum in seen:
        assert within_one_cell(asked, tile, buffers, TILE), (
            f"ComfyUI was asked for {asked / 2**20:.3f} MiB (noise shape {shape}); the largest tile needs "
            f"{tile / 2**20:.3f} MiB, the pack's buffers on each device (accumulator and input copy) "
            f"{buffers / 2**20:.3f} MiB")
