"""A worker rank (its own process, ComfyUI's model code but no server): holds a model and a VAE replica.

Invariants: it handles messages strictly in seq order and acknowledges each one; a job that fails or is
stopped still completes its part of the data plane (a model call's worker joins the all_reduce only after
a successful ack; a decode's worker sends zeros for the tiles it did not decode), so rank 0 never waits
in a collective for a worker that gave up; it exits when rank 0 goes away (pipe EOF, or a broken store).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import logging
import os
import socket
import sys
import threading
from typing import Any

import torch
import torch.distributed as dist

from . import wire as W
from .band import receive_band
from .nccl import WORKER_NCCL_ENV, join_group, one_at_a_time, set_worker_nccl_env
from .replica import receive_weights
from .settings import TDPGroupError, device_name

log = logging.getLogger(__name__)

EXIT_OK, EXIT_LOST = 0, 3
IDLE_WAIT = datetime.timedelta(days=365)
"""How long an idle worker waits for the next message, or for rank 0 to enter a model call's all_reduce
(rank 0 going away ends the wait at once; rank 0 times every exchange itself)."""



class _Stopped(Exception):
    """Rank 0 asked to skip the remaining tiles of the job in flight (interrupt, or its own error)."""


class RankZeroGone(Exception):
    """The store of rank 0 is unreachable: the group is over."""


def _device(name: str) -> torch.device:
    if name == "auto":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local % max(torch.cuda.device_count(), 1)) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device_name(name))


def _import_comfy(config: W.WorkerConfig, device: torch.device) -> str:
    """Configure ComfyUI's settings like rank 0's (attention, precision), for this device; import its model code."""
    import comfy.cli_args

    args = comfy.cli_args.args
    for key, value in config.comfy_args.items():
        if hasattr(args, key):
            setattr(args, key, value)
    args.cpu = device.type == "cpu"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    import comfy.model_base  # noqa: F401
    import comfy.model_management  # noqa: F401
    import comfyui_version

    return comfyui_version.__version__


class Worker:
    def __init__(self, args: argparse.Namespace):
        self.args, self.rank, self.world = args, args.rank, args.world_size
        self.timeout = datetime.timedelta(seconds=args.timeout)
        self.device = _device(args.device)
        self.replicas: dict[str, tuple[str, Any]] = {}
        self._stopping = threading.Event()
        self._heart = threading.Thread(target=self._heartbeat, name="ltx-tdp-heartbeat", daemon=True)

    def connect(self) -> None:
        a = self.args
        client = dist.TCPStore(a.master_addr, a.master_port, None, False, timeout=self.timeout)
        self.store = dist.PrefixStore(W.PREFIX, client)
        self.config = W.WorkerConfig(**W.loads(self.store.get("config")))
        if self.config.world_size != self.world:
            raise TDPGroupError(f"rank 0 expects {self.config.world_size} ranks, not --world-size {self.world}")
        self.comm_device = self.device if self.config.backend == "nccl" else torch.device("cpu")
        version = _import_comfy(self.config, self.device)
        if a.threads:
            torch.set_num_threads(a.threads)
        set_worker_nccl_env()
        hello = {"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "device": str(self.device),
                 "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "comfy_version": version,
                 "torch_version": torch.__version__, "nccl_env": {k: os.environ.get(k) for k in WORKER_NCCL_ENV}}
        self._heart.start()
        self.store.set(f"hello/{self.rank}", W.dumps(hello))
        # rank 0 says go once every worker is ready (slow starters must not time out the fast ones)
        self.store.wait(["start"], datetime.timedelta(seconds=max(a.timeout, W.STARTUP_MIN_S)))
        self.join(client)
        log.info("rank %d/%d ready on %s (%s)", self.rank, self.world, self.device, self.config.backend)

    def join(self, client: Any) -> None:
        """Join the process group on rank 0's store `client` (multigpu.nccl.join_group: on NCCL, this worker's
        device is the communicator's, built now)."""
        join_group(self.config.backend, dist.PrefixStore("pg", client), self.rank, self.world, self.config.timeout_s,
                   self.device)

    def _heartbeat(self) -> None:
        """Bump hb/<rank> every HEARTBEAT_S (see wire.HEARTBEAT_S for the one reason), on its own connection,
        until close() stops it. close() joins this thread: a thread still inside a store call while Python
        finalises is ended by a forced unwind through C++ frames, which aborts the process (SIGABRT)."""
        a = self.args
        try:
            store = dist.PrefixStore(W.PREFIX, dist.TCPStore(a.master_addr, a.master_port, None, False,
                                                             timeout=self.timeout))
            while True:
                store.add(f"hb/{self.rank}", 1)
                if self._stopping.wait(W.HEARTBEAT_S):
                    return
        except Exception:  # rank 0 is gone: the main thread finds out on its own
            return

    def serve(self) -> int:
        seq = 1
        while True:
            try:
                self.store.wait([f"msg/{seq}"], IDLE_WAIT)
                msg = W.loads(self.store.get(f"msg/{seq}"), self.config.source_package)
            except RuntimeError as e:
                raise RankZeroGone(str(e).splitlines()[0]) from None
            if isinstance(msg, W.ShutdownMessage):
                self._ack(seq, "")
                return EXIT_OK
            after, error = None, ""
            try:
                with torch.inference_mode():
                    after = self._load_replica(msg) if isinstance(msg, W.ReplicaMessage) else self._job(msg)
            except Exception as e:
                log.exception("rank %d: message %d failed", self.rank, seq)
                error = f"{type(e).__name__}: {e}"
            self._ack(seq, error)
            if after is not None and not error:
                try:
                    with torch.inference_mode():
                        after()
                except RuntimeError as e:  # a collective broke: rank 0 (or a peer) is gone
                    raise RankZeroGone(str(e).splitlines()[0]) from None
            seq += 1

    def _ack(self, seq: int, error: str) -> None:
        """ack/<seq>/<rank> (b"" or the error), then the counter; the last worker to count sets done/<seq>."""
        try:
            self.store.set(f"ack/{seq}/{self.rank}", error.encode())
            if self.store.add(f"acks/{seq}", 1) == self.world - 1:
                self.store.set(f"done/{seq}", b"")
        except RuntimeError as e:
            raise RankZeroGone(str(e).splitlines()[0]) from None

    def _load_replica(self, msg: W.ReplicaMessage) -> None:
        self.replicas.pop(msg.kind, None)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        error, replica = None, None
        try:
            replica = msg.recipe.build(self.device)
        except Exception as e:  # still take every weight, or rank 0 would wait in its broadcast
            error = e
        receive_weights(replica.module if replica is not None else None, msg.weights,
                        one_at_a_time(lambda b: dist.broadcast(b, src=0, async_op=True)), self.comm_device,
                        replica.home if replica is not None else self.device)
        if error is not None:
            raise error
        self.replicas[msg.kind] = (msg.key, replica)
        log.info("rank %d: %s replica ready (%d tensors)", self.rank, msg.kind, len(msg.weights))

    def _job(self, msg: W.JobMessage):
        buffer = torch.empty(msg.job_bytes, dtype=torch.uint8, device=self.comm_device)
        dist.broadcast(buffer, src=0)
        home = self.device if msg.gather is None else torch.device("cpu")
        band: list[torch.Tensor] = []
        job = W.loads(buffer.cpu().numpy().tobytes(), self.config.source_package, device=home, band=band)
        del buffer
        receive_band(band, one_at_a_time(lambda b: dist.broadcast(b, src=0, async_op=True)), self.comm_device)
        stop = f"stop/{msg.seq}"

        def before_tile(_tile: Any = None) -> None:
            if self.store.check([stop]):
                raise _Stopped()

        if msg.gather is not None:
            return self._gather(job, msg, before_tile)
        target = self._target(msg)
        self._place_model(self.device)
        try:
            flat = job.run(target, self.rank, self.world, before_tile)
        except _Stopped:
            flat = torch.zeros(job.numel, dtype=job.dtype)

        def reduce() -> None:  # after the ack; queued only once rank 0 enters it too (wire.reduce_key)
            self.store.wait([W.reduce_key(msg.seq)], IDLE_WAIT)
            dist.all_reduce(flat.to(self.comm_device), op=dist.ReduceOp.SUM)

        return reduce

    def _target(self, msg: W.JobMessage) -> Any:
        """What the job of `msg` runs on: the target of this worker's current `kind` replica."""
        key, replica = self.replicas.get(msg.kind, (None, None))
        if key != msg.replica_key:
            raise TDPGroupError(f"rank {self.rank} holds no {msg.kind} replica {msg.replica_key}")
        return replica.target

    def _gather(self, job: Any, msg: W.JobMessage, before_tile: Any) -> None:
        """Each of this rank's tiles sent to rank 0 as the job gives it, queued once rank 0 receives it
        (wire.gather_key): at most one tile in flight while the next decodes. After an error or a stop the
        remaining tiles are sent as zeros."""
        import comfy.model_management as mm

        plan, lead, dtype = msg.gather
        error, tile_result, in_flight = None, None, None
        try:
            self._place_model(torch.device("cpu"))  # the VAE needs the room, as ComfyUI makes room on rank 0
            tile_result = job.tiles(self._target(msg), self.comm_device)
        except Exception as e:
            error = e
        for tile in plan.tiles_for_rank(self.rank, self.world):
            out = None
            if tile_result is not None:  # None after an error or a stop: the rest go as zeros
                try:
                    before_tile(tile)
                    out = tile_result(tile)
                except _Stopped:
                    tile_result = None
                except Exception as e:
                    error, tile_result = e, None
            if out is None:
                out = torch.zeros((*lead, *tile.shape), dtype=dtype, device=self.comm_device)
            if in_flight is not None:
                in_flight[0].wait()
            self.store.wait([W.gather_key(msg.seq, tile.index)], IDLE_WAIT)  # rank 0 receives this tile now
            in_flight = (dist.isend(out, dst=0), out)
            del out
        if in_flight is not None:
            in_flight[0].wait()
        del in_flight
        if self.device.type != "cpu":  # the VAE leaves this worker's GPU: the model replica needs the room
            mm.unload_all_models()
        if error is not None:
            raise error

    def _place_model(self, device: torch.device) -> None:
        """Move the model replica to `device` unless it is there (a decode moves it off the GPU)."""
        replica = self.replicas.get("model", (None, None))[1]
        model = replica.module if replica is not None else None
        first = next(model.parameters(), None) if model is not None and self.device.type != "cpu" else None
        if first is not None and first.device != device:
            model.to(device)
            torch.cuda.empty_cache()

    def close(self) -> None:
        """Stop the heartbeat (joined: see _heartbeat), drop the replicas, end the process group."""
        self._stopping.set()
        if self._heart.ident is not None:
            self._heart.join(timeout=self.timeout.total_seconds() + W.HEARTBEAT_S)
        self.replicas.clear()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def watch_parent_pipe() -> None:
    """Exit when rank 0's end of our stdin pipe closes (rank 0 ended, however it ended)."""
    fd = sys.stdin.fileno()

    def watch() -> None:
        with contextlib.suppress(OSError):  # os.read, not sys.stdin: no Python-level lock held at shutdown
            while os.read(fd, 4096):
                pass
        os._exit(EXIT_LOST)

    threading.Thread(target=watch, name="ltx-tdp-parent-pipe", daemon=True).start()


def run(args: argparse.Namespace) -> int:
    """Join rank 0's group once and serve it until it shuts down or goes away; the process exit code."""
    worker = Worker(args)
    try:
        worker.connect()
        return worker.serve()
    except RankZeroGone as e:
        log.warning("rank %d: rank 0 closed the group (%s)", args.rank, e)
        return EXIT_LOST
    finally:
        worker.close()
