"""ComfyUI's memory estimates as a sampler asks for them, read with ComfyUI's own code (the tests of
ltx.model.memory and the GPU check share these).

A TDP model should be sized by its largest tile plus the pack's own buffers; `pack_buffers` writes down what
the pack holds on the device during a model call, for the checks to compare against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

PROBE = "tdp_test_memory_probe"
FP64, FP32 = 8, 4


def record_estimates(model: Any) -> list[tuple[list[int], float, float]]:
    """Record, at every sampling run of `model` (a PREPARE_SAMPLING wrapper inside the pack's), the noise shape
    ComfyUI estimates for and `comfy.sampler_helpers.estimate_memory`'s (memory, minimum memory) for it."""
    import comfy.patcher_extension as ext
    import comfy.sampler_helpers

    seen: list[tuple[list[int], float, float]] = []

    def probe(executor, patcher, noise_shape, conds, *args, **kwargs):
        seen.append((list(noise_shape), *comfy.sampler_helpers.estimate_memory(patcher, noise_shape, conds)))
        return executor(patcher, noise_shape, conds, *args, **kwargs)

    model.add_wrapper_with_key(ext.WrappersMP.PREPARE_SAMPLING, PROBE, probe)
    return seen


def record_tile_batches(model: Any) -> list[int]:
    """The batch of every tile call of `model` (an APPLY_MODEL wrapper inside TDP's): 2 when cond and uncond
    ran as one batch."""
    import comfy.patcher_extension as ext

    batches: list[int] = []

    def count(executor, x, *args, **kwargs):
        batches.append(int(x.shape[0]))
        return executor(x, *args, **kwargs)

    model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, PROBE, count)
    return batches


def comfyui_estimate(model: Any, shape: Sequence[int], context_width: int = 16) -> float:
    """ComfyUI's estimate before sampling (cond + uncond) for a latent of `shape` on `model`, TDP-free."""
    import comfy.sampler_helpers

    cond = {"cross_attn": torch.zeros(1, 8, context_width)}
    return comfy.sampler_helpers.estimate_memory(model, list(shape), {"positive": [cond], "negative": [dict(cond)]})[0]


def pack_buffers(batch: int, full_numel: int, tile_numel: int, other_devices: bool = False) -> int:
    """Bytes the pack holds on the device besides the tile's model call (unpacked LTX video, batch `batch`):
    the fp64 accumulator of the whole frame, the tile's input as cut (fp32), the tile's result in fp64 and its
    window-weighted product; with `other_devices` (ComfyUI's MultiGPU clones) also each other device's copy of the
    call's input (fp32)."""
    copy = full_numel * FP32 if other_devices else 0
    return batch * (full_numel * FP64 + tile_numel * FP32 + 2 * tile_numel * FP64 + copy)


def within_one_cell(asked: float, tile: float, buffers: int, tile_shape: Sequence[int]) -> bool:
    """Whether `asked` is the tile's estimate plus the pack's buffers, rounded up by less than one latent cell
    of the tile's last axis (what the pre-sampling estimate's shape can express)."""
    return tile + buffers <= asked <= tile + buffers + math.ceil(tile / tile_shape[-1])
