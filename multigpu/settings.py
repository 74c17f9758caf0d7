"""Group settings: how many ranks, on which devices, over which backend, with which timeout and address.

`GroupSettings` is frozen and hashable: groups are reused across prompts while it stays equal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from .devices import machine_device, narrowed

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nccl", "gloo")


class TDPGroupError(RuntimeError):
    """A multi-GPU group that cannot start or has failed. The message names the rank and says what to do."""


@dataclass(frozen=True)
class GroupSettings:
    """A resolved group: `devices[r]` is rank r's device; rank 0 is this (ComfyUI) process.

    Devices are machine names (multigpu.devices): `cuda:N` is the machine's GPU N however this process is
    narrowed; `local_device` is rank 0's device as this process names it (None: `devices[0]`), e.g. cuda:0 for
    `devices[0]` cuda:3 in a ComfyUI started with --cuda-device 3.

    Invariants: len(devices) == world_size >= 1; backend is "nccl" or "gloo"; timeout_s > 0;
    external_workers needs a fixed port (workers started by hand must know where to connect).
    """

    devices: tuple[str, ...]
    backend: str = "gloo"
    timeout_s: float = 60.0
    address: str = "127.0.0.1"
    port: int = 0
    external_workers: bool = False
    threads: int = 0
    """torch threads per worker process (0: torch's default)."""
    local_device: str | None = None

    def __post_init__(self) -> None:
        if not self.devices:
            raise TDPGroupError("a group needs at least one device (rank 0, this ComfyUI)")
        if self.backend not in ("nccl", "gloo"):
            raise TDPGroupError(f"unknown backend {self.backend!r}; use nccl or gloo")
        if self.timeout_s <= 0:
            raise TDPGroupError(f"timeout must be positive, got {self.timeout_s}")
        if self.external_workers and self.port == 0 and self.world_size > 1:
            raise TDPGroupError("external workers need a fixed port to connect to; set port to a number, not 0")
        if self.backend == "nccl" and len(set(self.devices)) != len(self.devices):
            raise TDPGroupError(f"NCCL needs one GPU per rank; the devices {', '.join(self.devices)} repeat one. "
                                "Use fewer ranks or the gloo backend")

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def rank0_device(self) -> str:
        """Rank 0's device as this process (ComfyUI) names it."""
        return self.local_device or self.devices[0]


def device_name(text: str) -> str:
    """`text` as torch names the device; bare "cuda" means cuda:0. Raises TDPGroupError on junk."""
    try:
        dev = torch.device(text)
    except RuntimeError as e:
        raise TDPGroupError(f"{text!r} is not a device (expected e.g. cuda:0 or cpu): {e}") from None
    return "cuda:0" if dev.type == "cuda" and dev.index is None else str(dev)


def resolve_settings(ranks: int, devices: str, backend: str, timeout_s: float, address: str, port: int,
                     external_workers: bool = False, local_device: str | None = None, threads: int = 0) -> GroupSettings:
    """Settings from the launcher node's inputs; devices are machine GPU numbers (multigpu.devices).

    A device list wins over `ranks`. Without one: every rank on the CPU when ComfyUI runs on the CPU, else
    rank r on the r-th GPU after ComfyUI's among the GPUs ComfyUI sees (wrapping around). A ComfyUI narrowed
    to fewer GPUs than ranks (--cuda-device, CUDA_VISIBLE_DEVICES) cannot see the others: that needs a list.
    Rank 0 always runs on ComfyUI's own device (`local_device`). backend "auto" is NCCL when every rank is on
    its own CUDA GPU, else gloo.
    """
    local = device_name(local_device) if local_device else "cpu"
    rank0 = machine_device(local)
    listed = tuple(device_name(part.strip()) for part in devices.split(",") if part.strip())
    if listed:
        if listed[0] != rank0:
            log.warning("LTX TDP: rank 0 is this ComfyUI, which runs on %s (machine GPU numbers); the device list "
                        "starts with %s. Rank 0 uses %s.", rank0, listed[0], rank0)
        chosen = (rank0, *listed[1:])
        if ranks != len(listed):
            log.info("LTX TDP: the device list names %d devices; it overrides ranks=%d", len(listed), ranks)
    elif local.startswith("cuda") and torch.cuda.is_available():
        count, first = torch.cuda.device_count(), torch.device(local).index or 0
        seen = narrowed()
        if seen is not None and ranks > count:
            raise TDPGroupError(
                f"LTX TDP: this ComfyUI sees only {count} GPU(s) (CUDA_VISIBLE_DEVICES={seen}, e.g. from "
                f"--cuda-device), not the {ranks} ranks asked for; name each rank's GPU in the launcher's devices "
                f"by its machine number (as nvidia-smi numbers them), e.g. {rank0},cuda:N")
        if ranks > count:
            log.warning("LTX TDP: %d ranks on %d GPUs: some GPUs run two ranks", ranks, count)
        chosen = tuple(machine_device(f"cuda:{(first + r) % count}") for r in range(ranks))
    else:
        chosen = ("cpu",) * ranks
    if backend == "auto":
        cuda = all(d.startswith("cuda") for d in chosen)
        backend = "nccl" if cuda and torch.distributed.is_nccl_available() and len(set(chosen)) == len(chosen) else "gloo"
    return GroupSettings(devices=chosen, backend=backend, timeout_s=float(timeout_s), address=address.strip() or "127.0.0.1",
                         port=int(port), external_workers=external_workers, threads=threads,
                         local_device=local if local != rank0 else None)
