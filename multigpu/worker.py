"""A worker rank: joins rank 0's group, holds a model replica and a VAE replica, runs its share of every
model call and every tiled VAE decode.

Runs in its own process (started by `worker_main.py`), with ComfyUI's model code imported but no server.
Invariants: it handles messages strictly in seq order and acknowledges each one; for a CALL it joins the
reduction only after a successful ack (an error ack means rank 0 tears the group down); it exits when
rank 0 goes away (pipe EOF, parent change, or a broken store), so no worker outlives ComfyUI.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from ..ltx.model_call import TiledModelCall
from ..ltx.vae_decode import decode_tiled
from . import protocol as P
from .replica import build_replica, check_complete, load_bucket, restore_model_config
from .settings import TDPGroupError
from .vae import receive_vae

log = logging.getLogger(__name__)

EXIT_OK, EXIT_LOST = 0, 3


class _Stopped(Exception):
    """Rank 0 asked to skip the remaining tiles of the call in flight (interrupt)."""


class RankZeroGone(Exception):
    """The store of rank 0 is unreachable: the group is over."""


def _device(name: str) -> torch.device:
    if name == "auto":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local % max(torch.cuda.device_count(), 1)) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(name)
    return torch.device("cuda", 0) if dev.type == "cuda" and dev.index is None else dev


def _import_comfy(config: P.WorkerConfig, device: torch.device) -> str:
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

    try:
        import comfyui_version

        return comfyui_version.__version__
    except ImportError:
        return "unknown"


class Worker:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rank = args.rank
        self.world = args.world_size
        self.timeout = datetime.timedelta(seconds=args.timeout)
        self.device = _device(args.device)
        self.replica: Any = None
        self.model_key: str | None = None
        self.vae: Any = None
        self.vae_key: str | None = None
        self.stopping = threading.Event()

    # -- start --------------------------------------------------------------------------------------------
    def connect(self) -> None:
        a = self.args
        self.client = dist.TCPStore(a.master_addr, a.master_port, None, False, timeout=self.timeout)
        self.store = dist.PrefixStore(P.PREFIX, self.client)
        self.config = P.WorkerConfig(**P.loads(self.store.get(P.config_key())))
        if self.config.world_size != self.world:
            raise TDPGroupError(f"rank 0 expects {self.config.world_size} ranks; this worker was started with "
                                f"--world-size {self.world}")
        self.comm_device = self.device if self.config.backend == "nccl" else torch.device("cpu")
        version = _import_comfy(self.config, self.device)
        if self.args.threads:
            torch.set_num_threads(self.args.threads)
        hello = {"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "device": str(self.device),
                 "comfy_version": version, "torch_version": torch.__version__}
        threading.Thread(target=self._heartbeat, name="ltx-tdp-heartbeat", daemon=True).start()
        self.store.set(P.hello_key(self.rank), P.dumps(hello))
        self._wait_for_start()
        dist.init_process_group(self.config.backend, store=dist.PrefixStore("pg", self.client), rank=self.rank,
                                world_size=self.world, timeout=datetime.timedelta(seconds=self.config.timeout_s))
        log.info("rank %d/%d ready on %s (%s)", self.rank, self.world, self.device, self.config.backend)

    def _wait_for_start(self) -> None:
        """Rank 0 says go once every worker is ready (slow starters must not time out the fast ones)."""
        deadline = time.monotonic() + max(self.args.timeout, P.STARTUP_MIN_S)
        while not self.store.check([P.start_key()]):
            if time.monotonic() > deadline:
                raise TDPGroupError("rank 0 did not start the group in time (another worker failed to start?)")
            time.sleep(0.01)

    def _heartbeat(self) -> None:
        """Bump hb/<rank> so rank 0 can tell a silent worker from a busy one; leave when rank 0 is gone."""
        a = self.args
        try:
            client = dist.TCPStore(a.master_addr, a.master_port, None, False, timeout=self.timeout)
            store = dist.PrefixStore(P.PREFIX, client)
        except Exception:
            return
        n = 0
        while not self.stopping.wait(P.HEARTBEAT_S):
            n += 1
            try:
                store.set(P.heartbeat_key(self.rank), str(n))
            except Exception:
                if not self.stopping.is_set() and not a.rejoin:
                    log.error("rank %d: rank 0 is gone; exiting", self.rank)
                    os._exit(EXIT_LOST)
                return

    # -- loop ---------------------------------------------------------------------------------------------
    def serve(self) -> int:
        seq = 1
        while True:
            msg = self._next(seq)
            if isinstance(msg, P.ShutdownMessage):
                self._ack(seq, "")
                return EXIT_OK
            after = None
            try:
                with torch.inference_mode():
                    after = self._handle(msg)
                error = ""
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

    def _next(self, seq: int) -> P.Message:
        key, pause = P.msg_key(seq), 0.0005
        while True:
            try:
                if self.store.check([key]):
                    return P.loads(self.store.get(key), self.config.source_package)
            except RuntimeError as e:
                raise RankZeroGone(str(e)) from None
            time.sleep(pause)
            pause = min(pause * 1.5, 0.02)

    def _ack(self, seq: int, error: str) -> None:
        try:
            self.store.set(P.ack_key(seq, self.rank), error.encode())
        except RuntimeError as e:
            raise RankZeroGone(str(e)) from None

    def _handle(self, msg: P.Message):
        if isinstance(msg, P.ModelMessage):
            return self._load_model(msg)
        if isinstance(msg, P.CallMessage):
            return self._call(msg)
        if isinstance(msg, P.VaeMessage):
            return self._load_vae(msg)
        if isinstance(msg, P.DecodeMessage):
            return self._decode(msg)
        raise TDPGroupError(f"unknown message {type(msg).__name__}")

    # -- NEW_MODEL ----------------------------------------------------------------------------------------
    def _load_model(self, msg: P.ModelMessage) -> None:
        self.replica, self.model_key = None, None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        error, model, loaded = None, None, set()
        try:
            config = restore_model_config(P.loads(msg.model_config, self.config.source_package))
            model = build_replica(config, self.device)
        except Exception as e:  # still take every bucket, or rank 0 would wait in its broadcast
            error = e
        for index, size in enumerate(msg.bucket_bytes):
            bucket = torch.empty(size, dtype=torch.uint8, device=self.comm_device)
            dist.broadcast(bucket, src=0)
            if error is None:
                try:
                    load_bucket(model, bucket, index, msg.entries, loaded)
                except Exception as e:
                    error = e
            del bucket
        if error is not None:
            raise error
        check_complete(model, loaded)
        self.replica, self.model_key = model, msg.model_key
        log.info("rank %d: model replica ready (%d tensors)", self.rank, len(loaded))

    # -- CALL ---------------------------------------------------------------------------------------------
    def _call(self, msg: P.CallMessage):
        buffer = torch.empty(msg.payload_bytes, dtype=torch.uint8, device=self.comm_device)
        if msg.payload_bytes:
            dist.broadcast(buffer, src=0)
        if self.replica is None or msg.model_key != self.model_key:
            raise TDPGroupError(f"rank {self.rank} holds no replica of model {msg.model_key}")
        self._place_replica(self.device)
        tensors = [P.unpack(buffer, s).to(self.device) for s in msg.tensors]
        tree = P.join_tensors(msg.payload, tensors)
        call = TiledModelCall(msg.settings, msg.geometry, tree["x"], tree["kwargs"])
        replica, t, context, options = self.replica, tree["t"], tree["c_crossattn"], tree["transformer_options"]

        def run_tile(x: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
            return replica.apply_model(x, t, c_concat=None, c_crossattn=context, control=None,
                                       transformer_options=options, **kw)

        stop = P.stop_key(msg.seq)

        def before_tile(_tile: Any) -> None:
            if self.store.check([stop]):
                raise _Stopped()

        try:
            flat = call.partial(run_tile, self.rank, self.world, before_tile=before_tile)
        except _Stopped:
            flat = torch.zeros(call.buffer_numel(), dtype=torch.float32, device=self.device)

        def reduce() -> None:
            dist.all_reduce(flat.to(self.comm_device), op=dist.ReduceOp.SUM)

        return reduce

    # -- NEW_VAE ------------------------------------------------------------------------------------------
    def _load_vae(self, msg: P.VaeMessage) -> None:
        self.vae, self.vae_key = None, None
        gc.collect()
        self.vae, self.vae_key = receive_vae(msg, self.device, self.comm_device), msg.vae_key
        log.info("rank %d: VAE replica ready (%d tensors)", self.rank, len(msg.entries))

    # -- DECODE -------------------------------------------------------------------------------------------
    def _decode(self, msg: P.DecodeMessage):
        spec = msg.latent
        buffer = torch.empty(spec.offset + spec.nbytes, dtype=torch.uint8, device=self.comm_device)
        if spec.nbytes:
            dist.broadcast(buffer, src=0)
        if self.vae is None or msg.vae_key != self.vae_key:
            raise TDPGroupError(f"rank {self.rank} holds no replica of VAE {msg.vae_key}")
        latent = P.unpack(buffer, spec).to(device="cpu", copy=True)
        del buffer
        self._place_replica(torch.device("cpu"))
        stop = P.stop_key(msg.seq)

        def before_tile() -> None:
            if self.store.check([stop]):
                raise _Stopped()

        try:
            images = decode_tiled(self.vae, latent, **msg.settings, rank=self.rank, world=self.world,
                                  before_tile=before_tile)
        except _Stopped:
            images = torch.zeros(msg.output_shape, dtype=torch.float32)
        if tuple(images.shape) != tuple(msg.output_shape):
            raise TDPGroupError(f"rank {self.rank} decoded frames of shape {tuple(images.shape)}; rank 0 expects "
                                f"{tuple(msg.output_shape)}")

        def reduce() -> None:
            import comfy.model_management as mm

            for chunk in P.reduce_chunks(images.view(-1)):
                dist.all_reduce(chunk.to(self.comm_device), op=dist.ReduceOp.SUM)
            try:  # the VAE leaves this worker's GPU: the model replica needs the room at the next prompt
                mm.unload_all_models()
            except Exception as e:
                log.warning("rank %d: could not unload the VAE after the decode: %s", self.rank, e)

        return reduce

    def _place_replica(self, device: torch.device) -> None:
        """Move the model replica to `device` unless it is there. A decode moves it off the GPU (the VAE
        needs the room, as ComfyUI makes room on rank 0); the next model call brings it back."""
        if self.replica is None or self.device.type == "cpu":
            return
        first = next(self.replica.parameters(), None)
        if first is not None and first.device != device:
            self.replica.to(device)
            if device.type == "cpu":
                torch.cuda.empty_cache()

    def close(self) -> None:
        self.stopping.set()
        self.replica = None
        self.vae = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass


def watch_parent_pipe() -> None:
    """Exit when rank 0's end of our stdin pipe closes (rank 0 ended, however it ended)."""

    fd = sys.stdin.fileno()

    def watch() -> None:
        try:  # os.read, not sys.stdin: no Python-level lock held at interpreter shutdown
            while os.read(fd, 4096):
                pass
        except OSError:
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
