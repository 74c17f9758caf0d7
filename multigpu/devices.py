"""Which GPU each rank runs on, named the way users name GPUs, and the environment that gives a local worker its GPU.

A group's devices are **machine GPU numbers**: `cuda:N` is the GPU that CUDA numbers N when
CUDA_VISIBLE_DEVICES is unset, the number ComfyUI's `--cuda-device N` takes (the same as nvidia-smi's when
every GPU is one model, or with CUDA_DEVICE_ORDER=PCI_BUS_ID, which workers inherit from ComfyUI).

ComfyUI started with `--cuda-device N` sets CUDA_VISIBLE_DEVICES=N before torch starts (`--default-device N`
puts N first in a list of all numbers): torch in ComfyUI then sees only the listed GPUs and calls the first
one cuda:0. A worker started with ComfyUI's environment would see the same narrowed list, so every rank
would land on ComfyUI's GPU, or fail with "invalid device ordinal" for any other. So each local worker gets
CUDA_VISIBLE_DEVICES (and HIP_VISIBLE_DEVICES, ROCm's) set to its own GPU's number and computes on cuda:0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

VISIBLE_ENV = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
"""The variables that narrow which GPUs a process sees (ComfyUI sets both for --cuda-device)."""


def visible_gpus(env: Mapping[str, str], count: int) -> tuple[str, ...] | None:
    """The machine numbers (or UUIDs) of the `count` GPUs torch sees in a process with environment `env`, in
    torch's order (cuda:i is entry i); None when CUDA_VISIBLE_DEVICES is unset (cuda:i is GPU i). CUDA stops
    at the first entry it cannot use, so only the first `count` entries count."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())[:count]


def machine_device(local: str, env: Mapping[str, str] | None = None, count: int | None = None) -> str:
    """The machine name of `local`, a device as this process names it: `cuda:0` of a ComfyUI started with
    `--cuda-device 3` is `cuda:3`. Anything but a CUDA device is returned as it is."""
    dev = torch.device(local)
    if dev.type != "cuda":
        return str(dev)
    env = os.environ if env is None else env
    count = torch.cuda.device_count() if count is None else count
    visible = visible_gpus(env, max(count, (dev.index or 0) + 1))
    index = dev.index or 0
    return f"cuda:{visible[index] if visible is not None and index < len(visible) else index}"


def worker_device_env(device: str) -> tuple[str, dict[str, str]]:
    """(the `--device` a local worker computes on, the variables to set in its environment) for a worker on the
    machine device `device`: a GPU is made the worker's only visible one, its cuda:0."""
    dev = torch.device(device) if not device.startswith("cuda:") else None
    if dev is not None:  # cpu (or anything else torch names): the worker uses it as given
        return str(dev), {}
    number = device.split(":", 1)[1]
    return "cuda:0", dict.fromkeys(VISIBLE_ENV, number)


def narrowed(env: Mapping[str, str] | None = None) -> str | None:
    """CUDA_VISIBLE_DEVICES when this process sees a chosen subset of the machine's GPUs, else None."""
    return (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
