"""Rank 0's side of a live worker group: start, send models, run calls, detect faults, tear down.

Invariants:
* At most one session is alive per process (torch.distributed has one default group); `group.py`
  enforces it.
* Every message is acknowledged by every worker before the next one is posted and before rank 0
  enters a reduction; a worker that dies, reports an error or stops answering ends the session (all
  processes killed, the group destroyed) and raises TDPGroupError naming the rank. Nothing hangs longer
  than the configured timeout, and the next use starts a fresh session.
* An interrupt keeps the group in step: ranks skip their remaining tiles, the reduction still runs,
  then rank 0 raises ComfyUI's interrupt.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import protocol as P
from .launch import (bind_env, describe_exit, interface_of, listen_socket, resolve_ipv4, spawn_worker, stop_processes,
                     worker_command)
from .settings import GroupSettings, TDPGroupError

log = logging.getLogger(__name__)

SOURCE_PACKAGE = __package__.rsplit(".", 1)[0]
"""The pack's package name in this process (ComfyUI names it after the custom node folder)."""

NOT_SENT_ARGS = {"cpu", "cuda_device", "default_device", "directml", "oneapi_device_selector", "listen", "port"}
"""ComfyUI command-line settings a worker does not take from rank 0 (it has its own device)."""


def comfyui_dir() -> Path:
    """The ComfyUI tree this process runs (where the `comfy` package lives)."""
    import comfy.model_base

    return Path(comfy.model_base.__file__).resolve().parents[1]


class Session:
    """A started group: the store, the worker processes (unless external) and the process group."""

    def __init__(self, settings: GroupSettings):
        self.settings = settings
        self.world = settings.world_size
        self.workers = list(range(1, self.world))
        self.procs: dict[int, Any] = {}
        self.hellos: dict[int, dict] = {}
        self.seq = 0
        self.model_key: str | None = None
        self.vae_key: str | None = None
        self.pending: int | None = None
        self.closed = False
        self.lock = threading.RLock()
        self.timeout = datetime.timedelta(seconds=settings.timeout_s)
        device = torch.device(settings.devices[0])
        self.comm_device = device if settings.backend == "nccl" else torch.device("cpu")
        self._server = None
        self.store: Any = None
        self.port = settings.port
        self._pg = False
        self._heartbeats: dict[int, tuple[bytes, float]] = {}
        self.stats: collections.Counter[str] = collections.Counter()
        """Seconds spent per phase of model calls on rank 0: send, tiles, wait, reduce (and calls, bytes)."""

    # -- start --------------------------------------------------------------------------------------------
    def start(self) -> "Session":
        if self.world == 1:
            return self
        s = self.settings
        try:
            self._start_store()
            self._publish_config()
            if not s.external_workers:
                self._spawn()
            self._wait_hellos()
            self.store.set(P.start_key(), b"1")
            self._init_process_group()
        except BaseException:
            self.close(kill=True)
            raise
        log.info("LTX TDP: %d ranks ready (%s, %s backend, rendezvous %s:%d)", self.world,
                 ", ".join(s.devices), s.backend, s.address, self.port)
        return self

    def _start_store(self) -> None:
        s = self.settings
        sock = listen_socket(s.address, s.port)
        self.port = sock.getsockname()[1]
        fd = sock.detach()  # the store's server owns the socket from here on
        self._server = dist.TCPStore(resolve_ipv4(s.address), self.port, None, True, timeout=self.timeout,
                                     wait_for_workers=False, master_listen_fd=fd)
        self.store = dist.PrefixStore(P.PREFIX, self._server)

    def _publish_config(self) -> None:
        import comfy.cli_args
        import comfyui_version

        args = {k: v for k, v in vars(comfy.cli_args.args).items() if k not in NOT_SENT_ARGS}
        config = P.WorkerConfig(world_size=self.world, backend=self.settings.backend,
                                timeout_s=self.settings.timeout_s, devices=self.settings.devices, comfy_args=args,
                                source_package=SOURCE_PACKAGE, comfy_version=comfyui_version.__version__,
                                torch_version=torch.__version__)
        self.store.set(P.config_key(), P.dumps(dataclasses.asdict(config)))

    def _spawn(self) -> None:
        s = self.settings
        env = bind_env(resolve_ipv4(s.address))
        root = comfyui_dir()
        for r in self.workers:
            cmd = worker_command(root, r, self.world, s.address, self.port, s.devices[r], s.timeout_s, s.threads)
            self.procs[r] = spawn_worker(cmd, env)
            log.debug("LTX TDP: started rank %d (pid %d): %s", r, self.procs[r].pid, " ".join(cmd))

    def _wait_hellos(self) -> None:
        s = self.settings
        wait_s = max(s.timeout_s, P.STARTUP_MIN_S)
        deadline = time.monotonic() + wait_s
        pending = set(self.workers)
        while pending:
            for r in sorted(pending):
                if self.store.check([P.hello_key(r)]):
                    self.hellos[r] = P.loads(self.store.get(P.hello_key(r)))
                    pending.discard(r)
            for r in sorted(pending):
                p = self.procs.get(r)
                if p is not None and p.poll() is not None:
                    raise TDPGroupError(f"LTX TDP: worker rank {r} (pid {p.pid}, {s.devices[r]}) {describe_exit(p.returncode)} "
                                        "while starting; its log is in the ComfyUI console")
            if pending and time.monotonic() > deadline:
                how = ("were not started on the other host(s): start them with multigpu/worker_main.py "
                       f"(--master-addr {s.address} --master-port {self.port})" if s.external_workers
                       else "did not start")
                raise TDPGroupError(f"LTX TDP: rank(s) {', '.join(map(str, sorted(pending)))} {how} within "
                                    f"{wait_s:.0f} s")
            if pending:
                time.sleep(0.02)
        import comfyui_version

        for r, h in sorted(self.hellos.items()):
            if h.get("comfy_version") != comfyui_version.__version__ or h.get("torch_version") != torch.__version__:
                log.warning("LTX TDP: rank %d runs ComfyUI %s / torch %s; rank 0 runs %s / %s. Replicas may differ.",
                            r, h.get("comfy_version"), h.get("torch_version"), comfyui_version.__version__,
                            torch.__version__)

    def _init_process_group(self) -> None:
        if dist.is_initialized():
            raise TDPGroupError("LTX TDP: torch.distributed is already initialised in this ComfyUI process "
                                "(by another node?); the multi-GPU group cannot start")
        name = interface_of(resolve_ipv4(self.settings.address))
        own = name is not None and "GLOO_SOCKET_IFNAME" not in os.environ
        if own:  # gloo binds to the configured address only (read while the group is created)
            os.environ["GLOO_SOCKET_IFNAME"] = name
        if name is not None and self.settings.backend == "nccl":
            os.environ.setdefault("NCCL_SOCKET_IFNAME", name)  # NCCL reads it later, at its first collective
        try:
            dist.init_process_group(self.settings.backend, store=dist.PrefixStore("pg", self._server), rank=0,
                                    world_size=self.world, timeout=self.timeout)
        finally:
            if own:
                os.environ.pop("GLOO_SOCKET_IFNAME", None)
        self._pg = True

    # -- messages -----------------------------------------------------------------------------------------
    def post(self, make: Callable[[int], P.Message]) -> int:
        """Publish message seq+1 (built by `make(seq)`); the previous one has been acknowledged by all.

        Until `done()`, the session is mid-exchange: an error escaping before then ends the session (the
        workers may sit in a collective), see `runner.ModelRunner`.
        """
        try:
            data = P.dumps(make(self.seq + 1))
        except Exception as e:  # nothing was posted: the group is still in step
            raise TDPGroupError(f"LTX TDP: this model call cannot be sent to the worker ranks: {e}") from e
        self.seq += 1
        if self.seq > 1:
            self.store.delete_key(P.msg_key(self.seq - 1))
        self.store.set(P.msg_key(self.seq), data)
        self.pending = self.seq
        return self.seq

    def done(self) -> None:
        """The exchange of the last posted message is complete; every rank is waiting for the next one."""
        self.pending = None

    def broadcast(self, buffer: torch.Tensor, what: str) -> None:
        try:
            dist.broadcast(buffer, src=0)
        except Exception as e:
            raise self.fail(what, e) from None

    def all_reduce(self, flat: torch.Tensor, what: str) -> torch.Tensor:
        buf = flat.to(self.comm_device)
        try:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        except Exception as e:
            raise self.fail(what, e) from None
        return buf.to(flat.device)

    def wait_acks(self, seq: int, what: str, on_wait: Callable[[int], None] | None = None) -> None:
        """Wait until every worker acknowledged message `seq`, for at most the timeout.

        Raises (after tearing the session down) when a worker reports an error, exits, or stays silent.
        `on_wait(seq)` runs while waiting (interrupt checks).
        """
        deadline = time.monotonic() + self.settings.timeout_s
        pending, errors = set(self.workers), {}
        pause, next_beat = 0.0005, time.monotonic() + 1.0
        while pending:
            for r in sorted(pending):
                key = P.ack_key(seq, r)
                if self.store.check([key]):
                    value = self.store.get(key)
                    self.store.delete_key(key)
                    pending.discard(r)
                    if value:
                        errors[r] = value.decode(errors="replace")
            if errors:
                r, text = sorted(errors.items())[0]
                raise self.fail(what, detail=f"rank {r} ({self._where(r)}) failed: {text}")
            if not pending:
                return
            if on_wait is not None:
                on_wait(seq)
            dead = [r for r in pending if r in self.procs and self.procs[r].poll() is not None]
            now = time.monotonic()
            if dead or now > deadline:
                raise self.fail(what, pending=pending)
            if now > next_beat:
                next_beat = now + 1.0
                stale = self._stale(pending)
                if stale:
                    raise self.fail(what, pending=pending)
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    def stop_call(self, seq: int) -> None:
        self.store.set(P.stop_key(seq), b"1")

    # -- faults -------------------------------------------------------------------------------------------
    def _where(self, r: int) -> str:
        h = self.hellos.get(r, {})
        pid = self.procs[r].pid if r in self.procs else h.get("pid", "?")
        return f"pid {pid} on {h.get('host', '?')}, {h.get('device', self.settings.devices[r])}"

    def _stale(self, ranks: set[int], limit_s: float | None = None) -> list[int]:
        """Ranks whose heartbeat has not moved for `limit_s` (default: min(timeout, 10 s))."""
        limit = limit_s if limit_s is not None else min(self.settings.timeout_s, 10.0)
        now, stale = time.monotonic(), []
        for r in ranks:
            key = P.heartbeat_key(r)
            value = self.store.get(key) if self.store.check([key]) else b""
            seen = self._heartbeats.get(r)
            if seen is None or seen[0] != value:
                self._heartbeats[r] = (value, now)
            elif now - seen[1] > limit:
                stale.append(r)
        return stale

    def diagnose(self, pending: set[int] | None = None) -> list[str]:
        """Which ranks are dead, silent or behind, in words."""
        problems = []
        for r in self.workers:
            p = self.procs.get(r)
            if p is not None and p.poll() is not None:
                problems.append(f"rank {r} ({self._where(r)}) {describe_exit(p.returncode)}")
        if problems:
            return problems
        try:
            limit = 2.5 * P.HEARTBEAT_S
            self._stale(set(self.workers), limit)
            time.sleep(limit + 0.2)
            stale = self._stale(set(self.workers), limit)
        except Exception:  # the store itself is broken
            stale = []
        problems += [f"rank {r} ({self._where(r)}) stopped answering (no heartbeat)" for r in stale]
        if not problems and pending:
            problems += [f"rank {r} ({self._where(r)}) did not answer within {self.settings.timeout_s:.0f} s"
                         for r in sorted(pending)]
        return problems

    def fail(self, what: str, exc: BaseException | None = None, pending: set[int] | None = None,
             detail: str | None = None) -> TDPGroupError:
        """Tear the session down and return the error to raise (naming the rank(s) when they can be told)."""
        problems = [detail] if detail else self.diagnose(pending)
        if not problems:
            problems = [f"a worker rank failed ({exc})" if exc is not None else "a worker rank failed"]
        self.close(kill=True)
        return TDPGroupError(f"LTX TDP multi-GPU group failed {what}: {'; '.join(problems)}. The workers were "
                             "stopped; the next prompt starts a fresh group.")

    @contextlib.contextmanager
    def exchange(self, what: str) -> Iterator[None]:
        """Run one rank-0 exchange (a model call, a decode). If it breaks off while a message is pending,
        the ranks are out of step: the group is stopped (workers killed) before the error goes on."""
        try:
            yield
        except BaseException:
            if self.pending is not None and not self.closed:
                log.error("LTX TDP: %s broke off mid-exchange; stopping the worker group", what)
                self.close(kill=True)
            raise

    # -- end ----------------------------------------------------------------------------------------------
    def close(self, kill: bool = False) -> None:
        """End the session: workers told to exit (or killed), process group destroyed, no process left."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if self.store is not None and self.workers:
            try:  # live workers (external ones included) leave on their own
                seq = self.post(lambda seq: P.ShutdownMessage(seq))
                if not kill:
                    self._wait_quietly(seq, 5.0)
            except Exception:
                pass
        if self._pg:
            try:
                dist.destroy_process_group()
            except Exception as e:
                log.debug("LTX TDP: destroy_process_group: %s", e)
            self._pg = False
        stop_processes(list(self.procs.values()), grace_s=0.5 if kill else 5.0)
        self.store = None
        self._server = None

    def _wait_quietly(self, seq: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        pending = set(self.workers)
        while pending and time.monotonic() < deadline:
            pending = {r for r in pending if not self.store.check([P.ack_key(seq, r)])}
            time.sleep(0.01)
