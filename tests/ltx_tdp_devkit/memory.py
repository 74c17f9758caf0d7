"""Memory meters for the tests: the bytes of live CPU tensor storage (exact, repeatable) and the peak RSS
growth (reported beside it; noisy). Standalone: worker processes of the tests load this file by path."""

from __future__ import annotations

import ctypes
import gc
import re
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def peak_growth(fn) -> tuple[torch.Tensor, int | None]:
    """Run fn(); return its result and the peak RSS above the RSS before it, in bytes (None where the peak
    cannot be reset, /proc/self/clear_refs)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so RSS before is live memory only
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        return fn(), None
    before = _status_kib("VmRSS")
    result = fn()
    return result, (_status_kib("VmHWM") - before) * 1024


class PeakTensorBytes(TorchDispatchMode):
    """Counts the bytes of CPU tensor storage alive while it is active and keeps the peak.

    Every storage an op creates is counted until the storage is freed, so the peak is what the decode
    holds at once, whatever else the process (allocator caches, other threads) is doing: unlike RSS it
    reads the same on every run.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = self.peak = 0
        self._live: dict[int, int] = {}

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self._live:
                    self._live[key] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(storage, self._free, key)
        return out
