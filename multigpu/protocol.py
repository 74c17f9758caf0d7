"""The rank-0 <-> worker protocol: a control plane in the TCPStore, a data plane of collectives.

Control plane (keys of the group's TCPStore, under the prefix `ltx_tdp/`; values are pickles):

    config            rank 0 -> all   WorkerConfig as a plain dict, written once when the group starts
    hello/<rank>      worker -> 0     a dict (pid, host, device, versions), once the worker has imported ComfyUI and is ready
    start             rank 0 -> all   every worker said hello: all ranks join the process group now
    msg/<seq>         rank 0 -> all   the seq-th message: ModelMessage | CallMessage | VaeMessage | DecodeMessage
                                      | ShutdownMessage
    ack/<seq>/<rank>  worker -> 0     b"" when the worker handled message seq, else its error text
    stop/<seq>        rank 0 -> all   interrupt: skip the remaining tiles of call or decode seq (the reduction
                                      still runs)
    hb/<rank>         worker -> 0     heartbeat counter, bumped every HEARTBEAT_S seconds

Workers wait for `msg/<seq>` by polling the store (an idle worker never sits in a collective, so idle
time is unbounded while every collective stays within the group timeout). Seq numbers start at 1 and
grow by one per message; every worker handles every message in order.

Data plane (torch.distributed collectives, only right after a message names them):

    ModelMessage   (NEW_MODEL) one broadcast per weight bucket (uint8, rank 0 -> all), then acks
    CallMessage    (CALL) one broadcast of the call's tensors (uint8), every rank runs its tiles, acks,
                   then ONE all_reduce(SUM) of the flat fp32 partial buffer
    VaeMessage     (NEW_VAE) one broadcast per weight bucket of the VAE (uint8, rank 0 -> all), then acks
    DecodeMessage  (DECODE) one broadcast of the latent (uint8), every rank decodes its tiles into a CPU fp32
                   buffer of `output_shape`, acks, then all_reduce(SUM) of that buffer in chunks of
                   REDUCE_CHUNK_BYTES (in place on the CPU with gloo, through the device with NCCL)
    ShutdownMessage  (SHUTDOWN) no collective; workers ack and exit

A worker holds at most one model replica (the last NEW_MODEL) and one VAE replica (the last NEW_VAE);
rank 0 resends either only when its key changes.

Rank 0 reads every worker's ack before it enters the all_reduce, so a dead or stuck worker is found
(and named) by polling, never by a collective that hangs. Tensors travel as raw bytes (any dtype,
fp8 included); pack-local classes in a pickle are renamed to the worker's package by `loads`.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch

PREFIX = "ltx_tdp"
HEARTBEAT_S = 0.5
STARTUP_MIN_S = 60.0
"""Workers get at least this long to start (importing torch and ComfyUI takes seconds on a busy machine)."""
ALIGN = 16
"""Byte alignment of every tensor inside a packed buffer (so `.view(dtype)` needs no copy)."""

REDUCE_CHUNK_BYTES = 64 * 2**20
"""A decode's output (frames of the whole clip) is summed over the ranks in all_reduce chunks of this size,
so NCCL needs only one chunk on the device at a time."""

WORKER_PACKAGE = "ltx_tdp"
"""The package name a worker registers the pack under (worker_main.py)."""


def config_key() -> str:
    return "config"


def start_key() -> str:
    return "start"


def hello_key(rank: int) -> str:
    return f"hello/{rank}"


def msg_key(seq: int) -> str:
    return f"msg/{seq}"


def ack_key(seq: int, rank: int) -> str:
    return f"ack/{seq}/{rank}"


def stop_key(seq: int) -> str:
    return f"stop/{seq}"


def heartbeat_key(rank: int) -> str:
    return f"hb/{rank}"


# -- messages ---------------------------------------------------------------------------------------------
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
class ModelMessage:
    """NEW_MODEL: build a replica from `model_config` and load the weights that follow (as rank 0 patched them)."""

    seq: int
    model_key: str
    model_config: bytes
    entries: tuple[WeightEntry, ...]
    bucket_bytes: tuple[int, ...]


@dataclass(frozen=True)
class CallMessage:
    """CALL: one model call. `payload` is the pickled tree of (x, t, c_crossattn, kwargs, transformer_options)
    with TensorRefs; the tensors follow in one broadcast of `payload_bytes` bytes."""

    seq: int
    model_key: str
    settings: Any  # ltx.model_call.TDPSettings
    geometry: Any  # ltx.model_call.ModelGeometry
    payload: Any
    tensors: tuple[TensorSpec, ...]
    payload_bytes: int


@dataclass(frozen=True)
class VaeMessage:
    """NEW_VAE: build a VAE replica from `structure` (see multigpu.vae: the module's class and config, or
    the module pickled without its weights) and `spec`, then load the weights that follow."""

    seq: int
    vae_key: str
    structure: bytes
    spec: Any  # multigpu.vae.VaeSpec
    entries: tuple[WeightEntry, ...]
    bucket_bytes: tuple[int, ...]


@dataclass(frozen=True)
class DecodeMessage:
    """DECODE: one tiled VAE decode (ltx.vae_decode.decode_tiled with `settings`, rank r of the world). The
    latent follows in one broadcast of `latent.nbytes` bytes; the reduction sums buffers of `output_shape`."""

    seq: int
    vae_key: str
    settings: dict[str, int]
    latent: TensorSpec
    output_shape: tuple[int, ...]


@dataclass(frozen=True)
class ShutdownMessage:
    seq: int


Message = ModelMessage | CallMessage | VaeMessage | DecodeMessage | ShutdownMessage


# -- pickles ----------------------------------------------------------------------------------------------
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


# -- tensors in object trees ------------------------------------------------------------------------------
def split_tensors(obj: Any, out: list[torch.Tensor]) -> Any:
    """`obj` with every tensor (in dicts, lists, tuples) replaced by a TensorRef; tensors appended to `out`."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return TensorRef(len(out) - 1)
    if isinstance(obj, dict):
        return {k: split_tensors(v, out) for k, v in obj.items()}
    if isinstance(obj, list):
        return [split_tensors(v, out) for v in obj]
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size) and not hasattr(obj, "_fields"):
        return tuple(split_tensors(v, out) for v in obj)
    return obj


def join_tensors(obj: Any, tensors: list[torch.Tensor]) -> Any:
    """Inverse of split_tensors."""
    if isinstance(obj, TensorRef):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size) and not hasattr(obj, "_fields"):
        return tuple(join_tensors(v, tensors) for v in obj)
    return obj


def layout(tensors: list[torch.Tensor], start: int = 0) -> tuple[tuple[TensorSpec, ...], int]:
    """Byte layout of `tensors` packed one after another (ALIGN-aligned) from `start`; and the end."""
    specs, at = [], start
    for t in tensors:
        at = -(-at // ALIGN) * ALIGN
        nbytes = t.numel() * t.element_size()
        specs.append(TensorSpec(t.dtype, tuple(t.shape), at, nbytes))
        at += nbytes
    return tuple(specs), at


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view (or copy, when not contiguous) of `t`'s data."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def pack_into(buffer: torch.Tensor, tensors: list[torch.Tensor], specs: tuple[TensorSpec, ...]) -> None:
    for t, s in zip(tensors, specs):
        if s.nbytes:
            buffer[s.offset:s.offset + s.nbytes].copy_(as_bytes(t))


def unpack(buffer: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """The tensor `spec` describes, as a view of the uint8 `buffer`."""
    if spec.nbytes == 0:
        return torch.empty(spec.shape, dtype=spec.dtype, device=buffer.device)
    return buffer[spec.offset:spec.offset + spec.nbytes].view(spec.dtype).view(spec.shape)


def reduce_chunks(flat: torch.Tensor) -> list[torch.Tensor]:
    """Views of the 1-D `flat` of at most REDUCE_CHUNK_BYTES each: the pieces every rank reduces, in order."""
    step = max(1, REDUCE_CHUNK_BYTES // flat.element_size())
    return [flat[i:i + step] for i in range(0, flat.numel(), step)]


@dataclass
class Outbox:
    """Tensors to send after a message, with their layout (built by `Outbox.of`)."""

    tensors: list[torch.Tensor] = field(default_factory=list)
    specs: tuple[TensorSpec, ...] = ()
    nbytes: int = 0

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> "Outbox":
        specs, nbytes = layout(tensors)
        return cls(tensors, specs, nbytes)

    def buffer(self, device: torch.device | str) -> torch.Tensor:
        buf = torch.empty(self.nbytes, dtype=torch.uint8, device=device)
        pack_into(buf, self.tensors, self.specs)
        return buf
