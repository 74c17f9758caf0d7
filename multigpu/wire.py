"""What travels between rank 0 and the workers: store keys, messages and pickles.

Control plane, keys of the group's TCPStore under `ltx_tdp/` (values are pickles or text):

    config           0 -> all  WorkerConfig (as a dict), once      hello/<r>      r -> 0  ready (b"" if it died)
    start            0 -> all  every worker said hello: join the process group
    msg/<seq>        0 -> all  ReplicaMessage | JobMessage | ShutdownMessage, handled in seq order
    ack/<seq>/<r>    r -> 0    b"" when r handled message seq, else its error text
    acks/<seq>       r -> 0    TCPStore.add counter of the acks; the worker that brings it to world-1 sets
    done/<seq>       r -> 0    ... this key, which rank 0 waits for with TCPStore.wait and the group timeout
    stop/<seq>       0 -> all  interrupt or rank-0 error: skip the remaining tiles of job seq
    reduce/<seq>     0 -> all  rank 0 enters the all_reduce of model call seq (its own tiles are done)
    hb/<r>           r -> 0    heartbeat counter (TCPStore.add every HEARTBEAT_S, from a thread of the worker)

Data plane (torch.distributed, only right after a message names it): a ReplicaMessage is followed by one
broadcast per weight (its bytes); a JobMessage by one broadcast of the pickled job (its small tensors inside),
then its large tensors (BAND_MIN_BYTES and more: a decode's latent and noise field) one BAND_CHUNK_BYTES
broadcast at a time, straight from and into the tensors themselves, then the acks and one all_reduce(SUM)
(model calls), or each worker's tiles sent to rank 0 (VAE decodes), each once rank 0 asks for it:

    gather/<seq>/<i>   0 -> all  rank 0 receives tile i of decode seq now (its owner queues the send only then)

A worker starts a collective only when rank 0 is about to run it (NCCL times each operation from when it is
queued, gloo from when it starts, and a worker whose timer runs out ends): it takes the weights one broadcast
at a time, each waited for before the next is queued, and joins a model call's all_reduce once rank 0 says
so (`reduce/<seq>`), not while rank 0 still runs an extra tile of its own; and it sends each decoded tile
only once rank 0 receives it (`gather/<seq>/<i>`), not while rank 0 still decodes tiles of its own.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

import torch

from ..package import PACKAGE

PREFIX = PACKAGE
STARTUP_MIN_S = 60.0
"""Workers get at least this long to start (importing torch and ComfyUI takes seconds on a busy machine)."""
HEARTBEAT_S = 0.5
"""Heartbeats exist for one question only: which worker stalled when a collective timed out. The collective
cannot say (every peer is in it); a SIGSTOPped or frozen process stops its heartbeat thread too."""
WORKER_PACKAGE = PACKAGE
"""The package name a worker registers the pack under (worker_main.py, through package.import_pack)."""

WeightName = tuple[str, torch.dtype, tuple[int, ...]]
"""(state-dict key, dtype, shape) of one weight."""

BAND_MIN_BYTES = 1 << 20
"""A job's tensors of at least this many bytes travel after its pickle, not inside it (`dumps(band=...)`)."""
BAND_CHUNK_BYTES = 64 << 20
"""Bytes per broadcast of a job's large tensors: what a chunk holds on the communication device at a time."""


def reduce_key(seq: int) -> str:
    """The store key by which rank 0 says it enters the all_reduce of model call `seq`."""
    return f"reduce/{seq}"


def gather_key(seq: int, index: int) -> str:
    """The store key by which rank 0 says it receives tile `index` of decode `seq` now."""
    return f"gather/{seq}/{index}"


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
class ReplicaMessage:
    """Build replica `key` with `recipe.build(device)` and load the weights that follow, one broadcast each in
    the order of `weights`, as rank 0 computes with them. A worker holds one replica per `kind`."""

    seq: int
    kind: str
    key: str
    recipe: Any
    weights: tuple[WeightName, ...]


@dataclass(frozen=True)
class JobMessage:
    """Run the job (`job_bytes` of pickle, one broadcast, then its large tensors) on the `kind` replica
    `replica_key`. `gather`: None for one all_reduce of `job.run`'s flat sum; else (TilePlan, lead shape,
    dtype): send each tile to rank 0, (*lead, *tile.shape) of dtype."""

    seq: int
    kind: str
    replica_key: str
    job_bytes: int
    gather: Any


@dataclass(frozen=True)
class ShutdownMessage:
    seq: int


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements as a flat uint8 tensor (a view when `t` is contiguous): how any dtype travels."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def byte_count(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return torch.Size(shape).numel() * dtype.itemsize


class _Pickler(pickle.Pickler):
    """Tensors travel as (is_parameter, dtype, shape, their own bytes), so a view never drags its base along;
    tensors in `placeholders` (by id, e.g. a module's weights that follow by broadcast) as no bytes at all; with
    `band` (a list), tensors of BAND_MIN_BYTES or more as their index in it (they follow the pickle)."""

    def __init__(self, file: io.BytesIO, placeholders: frozenset[int], band: list[torch.Tensor] | None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.placeholders, self.band = placeholders, band

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor):
            return None
        if id(obj) in self.placeholders:
            data: Any = None
        elif self.band is not None and obj.numel() * obj.element_size() >= BAND_MIN_BYTES:
            self.band.append(obj)
            data = len(self.band) - 1
        else:
            data = byte_view(obj.to("cpu")).numpy().tobytes()
        return isinstance(obj, torch.nn.Parameter), obj.dtype, tuple(obj.shape), data


class _Unpickler(pickle.Unpickler):
    """Loads `_Pickler`'s pickles: tensors on `device`, placeholders empty on the meta device, and classes of
    the pack's `source` package imported from `target` (the worker's name for it)."""

    def __init__(self, data: bytes, source: str | None, target: str, device: Any, band: list[torch.Tensor] | None):
        super().__init__(io.BytesIO(data))
        self.source, self.target, self.device, self.band = source, target, device, band

    def find_class(self, module: str, name: str) -> Any:
        s = self.source
        if s and s != self.target and (module == s or module.startswith(s + ".")):
            module = self.target + module[len(s):]
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        is_parameter, dtype, shape, data = pid
        if data is None:
            t = torch.empty(shape, dtype=dtype, device="meta")
        elif isinstance(data, int):  # a large tensor that follows the pickle, filled then
            if self.band is None or data != len(self.band):
                raise pickle.UnpicklingError("a job's large tensor arrived without its place")
            t = torch.empty(shape, dtype=dtype, device=self.device)
            self.band.append(t)
        elif data:
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape).to(self.device)
        else:
            t = torch.empty(shape, dtype=dtype, device=self.device)
        return torch.nn.Parameter(t, requires_grad=False) if is_parameter else t


def dumps(obj: Any, placeholders: frozenset[int] = frozenset(), band: list[torch.Tensor] | None = None) -> bytes:
    """`obj` pickled, its tensors by value (on any device, any dtype) except those in `placeholders` and, with
    `band` (an empty list), those of BAND_MIN_BYTES or more, which are appended to `band` instead
    (to be sent after the pickle, in `band_chunks`)."""
    out = io.BytesIO()
    _Pickler(out, placeholders, band).dump(obj)
    return out.getvalue()


def loads(data: bytes, source_package: str | None = None, target_package: str = WORKER_PACKAGE,
          device: Any = "cpu", band: list[torch.Tensor] | None = None) -> Any:
    """Unpickle `dumps`'s `data`: tensors on `device`, classes of the pack's `source_package` imported from
    `target_package`; the tensors `dumps` put in its `band` are appended, empty, to `band` (to be filled, in
    `band_chunks`, from what follows the pickle). torch.distributed peers trust each other: only use this on the
    group's own data."""
    return _Unpickler(data, source_package, target_package, device, band).load()


def band_chunks(t: torch.Tensor) -> list[torch.Tensor]:
    """The bytes of contiguous tensor `t` as views of at most BAND_CHUNK_BYTES each, in order."""
    flat = t.detach().reshape(-1).view(torch.uint8)
    return list(flat.split(BAND_CHUNK_BYTES)) if flat.numel() else []
