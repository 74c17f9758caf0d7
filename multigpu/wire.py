"""What travels between rank 0 and the workers: store keys, messages, pickles and packed tensors.

Control plane, keys of the group's TCPStore under `ltx_tdp/` (values are pickles or text):

    config           0 -> all  WorkerConfig (as a dict), once      hello/<r>      r -> 0  ready (b"" if it died)
    start            0 -> all  every worker said hello: join the process group
    msg/<seq>        0 -> all  ReplicaMessage | JobMessage | ShutdownMessage, handled in seq order
    ack/<seq>/<r>    r -> 0    b"" when r handled message seq, else its error text
    acks/<seq>       r -> 0    TCPStore.add counter of the acks; the worker that brings it to world-1 sets
    done/<seq>       r -> 0    ... this key, which rank 0 waits for with TCPStore.wait and the group timeout
    stop/<seq>       0 -> all  interrupt or rank-0 error: skip the remaining tiles of job seq
    hb/<r>           r -> 0    heartbeat counter (TCPStore.add every HEARTBEAT_S, from a thread of the worker)

Data plane (torch.distributed, only right after a message names it): a ReplicaMessage is followed by one
broadcast per weight bucket; a JobMessage by one broadcast of the job's tensors, then the acks and one
all_reduce(SUM) (model calls), or each worker's tiles sent to rank 0, then the acks (VAE decodes).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

import torch

PREFIX = "ltx_tdp"
STARTUP_MIN_S = 60.0
"""Workers get at least this long to start (importing torch and ComfyUI takes seconds on a busy machine)."""
HEARTBEAT_S = 0.5
"""Heartbeats exist for one question only: which worker stalled when a collective timed out. The collective
cannot say (every peer is in it); a SIGSTOPped or frozen process stops its heartbeat thread too."""
ALIGN = 16
"""Byte alignment of every tensor inside a packed buffer (so `.view(dtype)` needs no copy)."""
WORKER_PACKAGE = "ltx_tdp"
"""The package name a worker registers the pack under (worker_main.py)."""


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker needs before it imports ComfyUI: the run settings of rank 0."""

    world_size: int
    backend: str
    timeout_s: float
    devices: tuple[str, ...]
    comfy_args: dict[str, Any]
    source_package: str
    """The package name of the pack on rank 0; pickled pack classes are renamed from it."""
    comfy_version: str
    torch_version: str


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lies in a packed uint8 buffer."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class TensorRef:
    """Stands in for the index-th tensor of a packed payload inside a pickled object tree."""

    index: int


@dataclass(frozen=True)
class WeightEntry:
    key: str
    bucket: int
    spec: TensorSpec


@dataclass(frozen=True)
class ReplicaMessage:
    """Build replica `key` from `recipe` (multigpu.replica) and load the weights that follow, as rank 0 has them."""

    seq: int
    kind: str
    """"model" or "vae": a worker holds one replica of each kind."""
    key: str
    recipe: Any
    entries: tuple[WeightEntry, ...]
    bucket_bytes: tuple[int, ...]


@dataclass(frozen=True)
class JobMessage:
    """Run job `job_type(**fields)` (fields with TensorRefs; the tensors follow in one broadcast of
    `payload_bytes`) on the `kind` replica `replica_key`; `gather`: send tiles to rank 0, no all_reduce."""

    seq: int
    kind: str
    replica_key: str
    job_type: type
    fields: dict[str, Any]
    tensors: tuple[TensorSpec, ...]
    payload_bytes: int
    gather: Any
    """None: one all_reduce of `job.run`'s flat sum; else (TilePlan, lead shape): send each tile to rank 0."""


@dataclass(frozen=True)
class ShutdownMessage:
    seq: int



def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class _RenamingUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, source: str | None, target: str):
        super().__init__(io.BytesIO(data))
        self.source, self.target = source, target

    def find_class(self, module: str, name: str) -> Any:
        s = self.source
        if s and s != self.target and (module == s or module.startswith(s + ".")):
            module = self.target + module[len(s):]
        return super().find_class(module, name)


def loads(data: bytes, source_package: str | None = None, target_package: str = WORKER_PACKAGE) -> Any:
    """Unpickle `data`, importing classes of the pack's `source_package` from `target_package` instead.

    torch.distributed peers trust each other: only use this on data from the group's own store.
    """
    return _RenamingUnpickler(data, source_package, target_package).load()


def _walk(obj: Any, leaf: Any) -> Any:
    """`obj` with `leaf(x)` for every tensor or TensorRef x inside its dicts, lists and tuples."""
    if isinstance(obj, (torch.Tensor, TensorRef)):
        return leaf(obj)
    if isinstance(obj, dict):
        return {k: _walk(v, leaf) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, leaf) for v in obj]
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size) and not hasattr(obj, "_fields"):
        return tuple(_walk(v, leaf) for v in obj)
    return obj


def split_tensors(obj: Any, out: list[torch.Tensor]) -> Any:
    """`obj` with every tensor replaced by a TensorRef; the tensors appended to `out`."""
    return _walk(obj, lambda t: out.append(t) or TensorRef(len(out) - 1))


def join_tensors(obj: Any, tensors: list[torch.Tensor]) -> Any:
    """Inverse of split_tensors."""
    return _walk(obj, lambda ref: tensors[ref.index])


def layout(tensors: list[torch.Tensor], start: int = 0) -> tuple[tuple[TensorSpec, ...], int]:
    """Byte layout of `tensors` packed one after another (ALIGN-aligned) from `start`; and the end."""
    specs, at = [], start
    for t in tensors:
        at = -(-at // ALIGN) * ALIGN
        nbytes = t.numel() * t.element_size()
        specs.append(TensorSpec(t.dtype, tuple(t.shape), at, nbytes))
        at += nbytes
    return tuple(specs), at


def put(buffer: torch.Tensor, spec: TensorSpec, t: torch.Tensor) -> None:
    """Copy `t`'s data into the uint8 `buffer` where `spec` (from `layout`) places it."""
    if spec.nbytes:
        buffer[spec.offset:spec.offset + spec.nbytes].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))


def pack(tensors: list[torch.Tensor], specs: tuple[TensorSpec, ...], nbytes: int, device: Any) -> torch.Tensor:
    """One uint8 buffer on `device` holding `tensors` at `specs` (from `layout`)."""
    buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for t, s in zip(tensors, specs):
        put(buffer, s, t)
    return buffer


def unpack(buffer: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """The tensor `spec` describes, as a view of the uint8 `buffer`."""
    if spec.nbytes == 0:
        return torch.empty(spec.shape, dtype=spec.dtype, device=buffer.device)
    return buffer[spec.offset:spec.offset + spec.nbytes].view(spec.dtype).view(spec.shape)
