"""NCCL's environment on each side of a group, and how every rank joins the process group.

NCCL behaviour that only a GPU shows, kept in one place:

* Error handling is read from the environment when a process group is built. Rank 0 (ComfyUI) must never be
  killed by a worker's fault; a worker must exit when a collective fails (rank 0 then names it). Each side
  sets its own values in its own process, so a worker never inherits rank 0's (nor a value rank 0 set for an
  earlier group) and local and external workers behave alike.
* NCCL times each operation from when it is queued, and a plain (synchronous) call returns once the
  operation is queued: a worker that queued every weight broadcast at once would time out on the later ones
  while rank 0 still computes earlier ones (LoRA merges, offloaded weights). `one_at_a_time` keeps one queued.
* A communicator is built at `init_process_group` only when it is given the rank's `device_id`; without it,
  NCCL builds it inside the first collective, before any `work.wait(timeout)` counts, so a peer that dies
  while rank 0 waits there (a worker building a 22B replica runs out of host memory) hangs rank 0 with no
  timeout. With `device_id` the communicator is built right after every worker said hello, while all ranks
  are alive and do nothing else.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

RANK0_NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "TORCH_NCCL_ENABLE_MONITORING": "0"}
"""Set on rank 0 (ComfyUI) before the process group starts, so that no worker fault kills ComfyUI: error
handling 3 (torch's default) and 1 kill the process when a collective fails; 2 (CleanUpOnly) only aborts
the communicators. The monitoring thread only kills a process whose watchdog hangs. docs/multi-gpu.md: "NCCL cannot kill ComfyUI"."""

WORKER_NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_ENABLE_MONITORING": "1"}
"""Set by every worker in its own process before it joins (torch 2.9's defaults, stated): a worker whose
collective fails or times out ends at once, and one whose watchdog hangs is killed by the monitor, so rank 0
sees it exit and names it. Without this a worker started after rank 0 had built a group would inherit
RANK0_NCCL_ENV from rank 0's environment, and the first group's workers would not."""


def apply_env(values: dict[str, str], why: str) -> dict[str, str | None]:
    """Put `values` in force in this process's environment, logging each different value it replaces
    (`why` says what that value would have done); the values before."""
    before = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        if before[key] not in (None, value):
            log.warning("LTX TDP: %s=%s %s; using %s", key, before[key], why, value)
        os.environ[key] = value
    return before


def set_rank0_nccl_env() -> None:
    """RANK0_NCCL_ENV in force in this process (rank 0), over a user's own values (logged)."""
    apply_env(RANK0_NCCL_ENV, "would let a failing worker kill ComfyUI")


def set_worker_nccl_env() -> None:
    """WORKER_NCCL_ENV in force in this process (a worker), over inherited values (logged)."""
    apply_env(WORKER_NCCL_ENV, "would keep a worker alive after its collective failed")


def join_group(backend: str, store: Any, rank: int, world: int, timeout_s: float, device: torch.device) -> None:
    """Join the default process group as `rank`; on NCCL with `device` as its `device_id`, so the communicator
    is built here and now (see the module's docstring), not inside the first collective."""
    options: dict[str, Any] = {"device_id": torch.device(device)} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s), **options)


FOLLOW_WAIT = datetime.timedelta(days=365)
"""How long a worker waits for one collective it queued (rank 0 times every exchange itself)."""


def one_at_a_time(start: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], None]:
    """`start(buffer)`, which queues an asynchronous collective and returns its work, made to return only once
    that collective completed, so each operation's clock starts when rank 0 has finished the previous one.
    (`wait` with a timeout blocks the calling thread under NCCL as under gloo.)"""

    def run(buffer: torch.Tensor) -> None:
        start(buffer).wait(FOLLOW_WAIT)

    return run
