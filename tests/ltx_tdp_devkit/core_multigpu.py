"""ComfyUI's own in-process MultiGPU (comfy/multigpu.py, ComfyUI 0.24+) on a CPU machine, for tests and benchmarks.

HARDWARE MOCK: a CPU machine has one torch device, so `fake_devices(n)` makes
`comfy.model_management.get_all_torch_devices` report `cpu, cpu:1, ..., cpu:n-1`. Nothing else is mocked:
MultiGPU CFG Split's deepclones come from the loader's own factory (`cached_patcher_init`), ComfyUI loads them
"onto" their devices, its guider builds its MultiGPUThreadPool (one thread per device) and the pack's dispatch
runs as on GPUs. `torch.device("cpu", 1)` is a dict key of its own, while tensors moved to it stay on the CPU.
The test node pack applies the same mock in a headless server when LTX_TDP_TEST_FAKE_DEVICES=n is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

SKIP_REASON = "this ComfyUI has no in-process MultiGPU (comfy/multigpu.py; ComfyUI 0.24 and later have it)"
FAKE_DEVICES_ENV = "LTX_TDP_TEST_FAKE_DEVICES"
RECORDER_KEY = "tdp_test_tile_calls"


def has_core_multigpu() -> bool:
    return importlib.util.find_spec("comfy.multigpu") is not None


def cpu_devices(n: int) -> list[torch.device]:
    """The n devices the mock reports: the plain CPU, then cpu:1 ... cpu:n-1."""
    return [torch.device("cpu")] + [torch.device("cpu", i) for i in range(1, n)]


def fake_enumeration(n: int):
    """A stand-in for comfy.model_management.get_all_torch_devices that reports `cpu_devices(n)`."""
    devices = cpu_devices(n)

    def get_all_torch_devices(exclude_current: bool = False) -> list[torch.device]:
        return devices[1:] if exclude_current else list(devices)

    return get_all_torch_devices


def install_fake_devices(n: int) -> None:
    """HARDWARE MOCK for a whole headless server (the test node pack calls it when FAKE_DEVICES_ENV is set)."""
    import comfy.model_management as mm

    mm.get_all_torch_devices = fake_enumeration(n)


@contextlib.contextmanager
def fake_devices(n: int) -> Iterator[list[torch.device]]:
    """HARDWARE MOCK (see the module docstring) for the duration of the block."""
    import comfy.model_management as mm

    real = mm.get_all_torch_devices
    mm.get_all_torch_devices = fake_enumeration(n)
    try:
        yield cpu_devices(n)
    finally:
        mm.get_all_torch_devices = real


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch computes with `n` threads per op within the block (one per device: the devices are the cores here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cfg_split(model: Any, max_gpus: int, speeds: dict[int | None, float] | None = None) -> Any:
    """`model` as ComfyUI's MultiGPU CFG Split (MultiGPU_WorkUnits) makes it: `create_multigpu_deepclones`, with
    MultiGPU Options' relative `speeds` ({device index: speed}; the plain CPU's index is None) when given.

    Core's own function rather than the node: ComfyUI 0.24 / 0.33 do not register the MultiGPU Options node
    yet, and the node's reuse of already loaded clones (`reuse_loaded=True`) raises AttributeError ("'NoneType'
    object has no attribute 'model'") when ComfyUI's list of loaded models holds an entry whose patcher was
    garbage-collected while its model lives on, which the tests' session-long models make likely. Each call
    here makes a fresh deepclone through the loader's factory; the server tests run the node itself."""
    import comfy.multigpu

    options = None
    if speeds:
        options = comfy.multigpu.GPUOptionsGroup()
        for index, speed in speeds.items():
            options.add(comfy.multigpu.GPUOptions(index, speed))
    return comfy.multigpu.create_multigpu_deepclones(model, max_gpus, options, reuse_loaded=False)


@dataclass
class TileCalls:
    """An APPLY_MODEL wrapper added after TDP's (so it runs inside it: once per tile call, on every device):
    records which BaseModel ran each tile call, with what batch, in which thread."""

    calls: list[tuple[int, int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, executor, x, *args, **kwargs):
        with self.lock:
            self.calls.append((id(executor.class_obj), int(x.shape[0]), threading.current_thread().name))
        return executor(x, *args, **kwargs)

    def on(self, model: Any) -> Any:
        import comfy.patcher_extension as ext

        m = model.clone()
        m.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, RECORDER_KEY, self)
        return m

    def per_model(self, main: Any) -> tuple[int, int]:
        """(tile calls on `main`, a BaseModel; tile calls on every other model)."""
        on_main = sum(1 for model_id, _, _ in self.calls if model_id == id(main))
        return on_main, len(self.calls) - on_main

    def counts(self) -> list[int]:
        """Tile calls per BaseModel, largest first."""
        per: dict[int, int] = {}
        for model_id, _, _ in self.calls:
            per[model_id] = per.get(model_id, 0) + 1
        return sorted(per.values(), reverse=True)

    def models(self) -> int:
        return len({model_id for model_id, _, _ in self.calls})

    def batches(self) -> set[int]:
        return {batch for _, batch, _ in self.calls}


def pool_threads() -> list[threading.Thread]:
    """Live threads of ComfyUI's MultiGPUThreadPool (its workers run `_worker_loop`)."""
    return [t for t in threading.enumerate() if "_worker_loop" in t.name and t.is_alive()]
