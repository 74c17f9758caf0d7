"""Rank 0's side of a live group: start it, keep the replicas current, run jobs, find faults, tear down.

Invariants (docs/multi-gpu.md: control plane, faults):
* Every message is acknowledged by every worker before the next one and before rank 0 enters a reduction.
  A worker that dies, reports an error or stays silent ends the session (workers killed, the process group
  aborted) and raises TDPGroupError naming the rank; the next use starts a fresh session.
* An interrupt or error in rank 0's own tiles keeps the group in step: the workers skip their remaining
  tiles, the reduction still runs, then rank 0 raises.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..tiling import TilePlan, owner_of
from ..tiling.ranks import AddTile, BeforeTile, Partial
from . import wire as W
from .launch import (diagnose, init_process_group, listen_socket, resolve_ipv4, start_local_workers, stop_processes,
                     wait_hellos, where, worker_config)
from .api import GatherJob, ReduceJob, ReplicaSource
from .band import send_band
from .replica import send_weights
from .settings import GroupSettings, TDPGroupError

log = logging.getLogger(__name__)


class Session:
    """A started group: the store, the worker processes (unless external) and the process group."""

    def __init__(self, settings: GroupSettings):
        self.settings, self.world = settings, settings.world_size
        self.workers = list(range(1, self.world))
        self.procs: dict[int, Any] = {}
        self.hellos: dict[int, dict] = {}
        self.held: dict[str, str] = {}
        self.seq, self.pending, self.starting, self.closed = 0, None, True, False
        self.lock = threading.RLock()
        self.timeout = datetime.timedelta(seconds=settings.timeout_s)
        self.comm_device = torch.device(settings.rank0_device if settings.backend == "nccl" else "cpu")
        self.store: Any = None
        self._server: Any = None
        self.port, self._pg = settings.port, False
        self.env_at_init: dict[str, str | None] = {}  # the NCCL variables as init_process_group saw them
        self.ended: str | None = None  # "aborted" or "destroyed": how the process group ended
        # rank 0's seconds per phase, jobs, bytes, and "timeouts": the waits it gave up on after the whole timeout
        self.stats: collections.Counter[str] = collections.Counter()

    # -- start --------------------------------------------------------------------------------------------
    def start(self) -> "Session":
        s = self.settings
        if not self.workers:  # one rank: nothing to start (its jobs never come here, see TDPGroup.ranks)
            return self
        try:
            sock = listen_socket(s.address, s.port)
            self.port = sock.getsockname()[1]
            self._server = dist.TCPStore(resolve_ipv4(s.address), self.port, None, True, timeout=self.timeout,
                                         wait_for_workers=False, master_listen_fd=sock.detach())
            self.store = dist.PrefixStore(W.PREFIX, self._server)
            self.store.set("config", W.dumps(dataclasses.asdict(worker_config(s))))
            if not s.external_workers:
                self.procs = start_local_workers(s, self.port, self._wake)
            self.hellos = wait_hellos(self)
            self.starting = False
            self.store.set("start", b"1")
            self.env_at_init = init_process_group(self, self._server)
            self._pg = True
        except BaseException:
            self.close(kill=True)
            raise
        log.info("LTX TDP: %d ranks ready (%s, %s backend, rendezvous %s:%d)", self.world, ", ".join(s.devices),
                 s.backend, s.address, self.port)
        return self

    def _wake(self, rank: int) -> None:
        """Local worker `rank` ended (launch's death watcher): wake rank 0 from whatever it waits for."""
        if self.closed or (not self.starting and self.pending is None):
            return  # between messages: the next wait_acks sees the exit itself
        try:
            store = dist.PrefixStore(W.PREFIX, dist.TCPStore(resolve_ipv4(self.settings.address), self.port, None,
                                                             False, timeout=datetime.timedelta(seconds=5)))
            store.set(f"hello/{rank}" if self.starting else f"done/{self.pending}", b"")
        except Exception as e:  # the session is closing
            log.debug("LTX TDP: waking rank 0 for rank %d: %s", rank, e)

    # -- the ranks' two exchanges (tiling.ranks.TileRanks) -----------------------------------------------
    def reduce(self, kind: str, source: ReplicaSource, job: ReduceJob, partial: Partial) -> torch.Tensor:
        """`partial`'s sum over every rank (one all_reduce), the workers running `job` on their `kind` replica
        of `source` (sent again when its key changed)."""
        return self._exchange(kind, source, lambda: self._reduce(kind, job, partial))

    def gather(self, kind: str, source: ReplicaSource, job: GatherJob, partial: Partial, plan: TilePlan, add: AddTile):
        """Every rank's tiles of `plan` blended: rank 0's by `partial`, the workers' (`job` on their `kind` replica
        of `source`) received tile by tile by `add`."""
        self._exchange(kind, source, lambda: self._gather(kind, job, partial, plan, add))

    def _exchange(self, kind: str, source: ReplicaSource, run: Callable[[], Any]) -> Any:
        """`run()` with the workers' `kind` replica current. If this breaks off while a message is pending, the
        ranks are out of step: the session is closed (workers killed) before the error goes on."""
        with self.lock:
            try:
                key = source.key()
                if self.held.get(kind) != key:
                    self._send_replica(kind, key, source)
                return run()
            except BaseException:
                if self.pending is not None and not self.closed:
                    log.error("LTX TDP: a %s job broke off mid-exchange; stopping the worker group", kind)
                    self.close(kill=True)
                raise

    def _send_replica(self, kind: str, key: str, source: ReplicaSource) -> None:
        sd = source.module.state_dict(keep_vars=True)
        names = source.names()
        placeholders = frozenset(id(t) for t in sd.values())  # a recipe holding the module pickles it without them
        what = f"while sending the {kind}"
        message = W.ReplicaMessage(self.seq + 1, kind, key, source.recipe(), names)
        seq = self.post(_pickle(message, f"the {kind}", placeholders))
        log.info("LTX TDP: sending the %s to %d worker rank(s): %.1f MiB in %d tensors", kind, len(self.workers),
                 sum(W.byte_count(d, s) for _, d, s in names) / 2**20, len(names))
        send_weights(source.weights(), names,
                     lambda b: self.collective(what, dist.broadcast, b.to(self.comm_device), src=0))
        self.wait_acks(seq, f"while the workers loaded the {kind}")
        self.pending = None
        self.held[kind] = key

    def _post_job(self, kind: str, job: Any, gather: Any, what: str) -> tuple[int, str, int]:
        """Post job seq; broadcast its pickle, then its large tensors (multigpu.band); (seq, what in words, bytes)."""
        band: list[torch.Tensor] = []
        payload = _pickle(job, f"this {kind} job", band=band)
        seq = self.post(W.dumps(W.JobMessage(self.seq + 1, kind, self.held[kind], len(payload), gather)))
        what = f"during {what} (message {seq})"
        buffer = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(self.comm_device)
        self.collective(what, dist.broadcast, buffer, src=0)
        del buffer
        return seq, what, len(payload) + send_band(band, lambda b: self.collective(what, dist.broadcast, b, src=0),
                                                   self.comm_device)

    def _own_tiles(self, seq: int, partial: Partial, before_tile: BeforeTile) -> tuple[Any, BaseException | None]:
        """Rank 0's share; an interrupt (a BaseException in newer ComfyUI) or error stops the workers' remaining
        tiles and is raised once the ranks are back in step."""
        try:
            return partial(0, self.world, before_tile), None
        except BaseException as e:
            if self.closed:  # the group itself failed (a receive)
                raise
            self.store.set(f"stop/{seq}", b"1")
            return None, e

    def _reduce(self, kind: str, job: ReduceJob, partial: Partial) -> torch.Tensor:
        clock = [time.perf_counter()]  # then after each phase: send, tiles, wait, reduce
        seq, what, sent = self._post_job(kind, job, None, "a model call")
        clock.append(time.perf_counter())
        result, failure = self._own_tiles(seq, partial, None)
        clock.append(time.perf_counter())
        self.wait_acks(seq, what)
        clock.append(time.perf_counter())
        flat = result if result is not None else torch.zeros(job.numel, dtype=job.dtype)
        buffer = flat.to(self.comm_device)
        self.store.set(W.reduce_key(seq), b"")  # the workers enter the all_reduce only now (wire.reduce_key)
        self.collective(what, dist.all_reduce, buffer, op=dist.ReduceOp.SUM)
        self.stats["reduce_bytes"] += buffer.numel() * buffer.element_size()
        self.pending = None
        clock.append(time.perf_counter())
        self._count(sent, clock)
        if failure is not None:
            raise failure
        return buffer.to(flat.device)

    def _gather(self, kind: str, job: GatherJob, partial: Partial, plan: TilePlan, add: AddTile) -> None:
        clock = [time.perf_counter()]
        message = (plan, tuple(job.tile_lead), job.tile_dtype)
        seq, what, sent = self._post_job(kind, job, message, "a tiled VAE decode")
        clock.append(time.perf_counter())
        receive = self._receiver(seq, what, message, add)
        _, failure = self._own_tiles(seq, partial, receive)
        receive(None)
        clock.append(time.perf_counter())
        self.wait_acks(seq, what)
        self.pending = None
        clock.extend([time.perf_counter()] * 2)
        self._count(sent, clock)
        if failure is not None:
            raise failure

    def _count(self, sent: int, clock: list[float]) -> None:
        self.stats.update({"jobs": 1, "send_bytes": sent})
        self.stats.update({phase: b - a for phase, a, b in zip(("send", "tiles", "wait", "reduce"), clock, clock[1:])})

    def _receiver(self, seq: int, what: str, message: tuple[Any, tuple[int, ...], torch.dtype], add: AddTile) -> Any:
        """receive(before): the workers' tiles enumerated before tile `before` (all when None) to `add`, in tile
        order, each into one receive buffer on the communication device (the largest: stats["receive_bytes"]),
        asked for only now (wire.gather_key: its owner queues the send then; NCCL times from the queueing)."""
        plan, lead, dtype = message
        queue = collections.deque(t for t in plan.tiles if owner_of(t.index, self.world))

        def receive(before: Any) -> None:
            while queue and (before is None or queue[0].index < before.index):
                tile = queue.popleft()
                buffer = torch.empty((*lead, *tile.shape), dtype=dtype, device=self.comm_device)
                self.stats["receive_bytes"] = max(self.stats["receive_bytes"], buffer.numel() * buffer.element_size())
                self.store.set(W.gather_key(seq, tile.index), b"")
                self.collective(what, lambda: dist.irecv(buffer, src=owner_of(tile.index, self.world)))
                self.store.delete_key(W.gather_key(seq, tile.index))
                add(tile, buffer)
                del buffer

        return receive

    # -- messages and collectives ---------------------------------------------------------------------------
    def post(self, data: bytes) -> int:
        """Publish message seq+1 (`data`, a pickled message carrying that seq); every worker acked the last one."""
        self.seq += 1
        if self.seq > 1:
            self.store.delete_key(f"msg/{self.seq - 1}")
            self.store.delete_key(W.reduce_key(self.seq - 1))
        self.store.set(f"msg/{self.seq}", data)
        self.pending = self.seq
        return self.seq

    def collective(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run `fn(*args, async_op=True)` (or `fn()` when it returns its work) and wait at most the timeout."""
        started = time.monotonic()
        try:
            work = fn(*args, async_op=True, **kwargs) if args else fn()
            work.wait(self.timeout)
        except Exception as e:
            if time.monotonic() - started >= self.settings.timeout_s:
                self.stats["timeouts"] += 1  # waited it out (a dead peer fails at once: connection closed)
            raise self.fail(what, e) from None

    def wait_acks(self, seq: int, what: str) -> None:
        """Wait (at most the timeout) for every worker's ack of message `seq`; fail naming who did not, died, erred."""
        keys, late = [f"ack/{seq}/{r}" for r in self.workers], None
        if not any(p.poll() is not None for p in self.procs.values()):
            try:
                self.store.wait([f"done/{seq}"], self.timeout)
            except dist.DistStoreError as e:
                late = e  # named below
                self.stats["timeouts"] += 1
        acked = [r for r, k in zip(self.workers, keys) if self.store.check([k])]
        errors = [(r, v) for r, v in zip(acked, self.store.multi_get([keys[r - 1] for r in acked]) if acked else []) if v]
        if errors:
            r, text = errors[0]
            raise self.fail(what, detail=f"rank {r} ({where(self, r)}) failed: {text.decode(errors='replace')}")
        if len(acked) < len(self.workers) or late is not None:  # all acked, not all counted: one stalled between
            raise self.fail(what, late, missing=set(self.workers) - set(acked))
        for k in [*keys, f"acks/{seq}", f"done/{seq}"]:
            self.store.delete_key(k)

    # -- faults and end -------------------------------------------------------------------------------------
    def fail(self, what: str, exc: BaseException | None = None, missing: set[int] = frozenset(),
             detail: str | None = None) -> TDPGroupError:
        """End the session and return the error to raise, naming the rank(s) when they can be told."""
        problems = [detail] if detail else diagnose(self, exc, missing)
        self.close(kill=True)
        return TDPGroupError(f"LTX TDP multi-GPU group failed {what}: {'; '.join(problems)}. The workers were "
                             "stopped; the next prompt starts a fresh group.")

    def close(self, kill: bool = False) -> None:
        """End the session: workers told to exit (or killed), the process group destroyed (aborted: a fault)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if self.store is not None and self.workers:
            with contextlib.suppress(Exception):  # live workers (external ones included) leave on their own
                seq = self.post(W.dumps(W.ShutdownMessage(self.seq + 1)))
                if not kill:
                    self.store.wait([f"done/{seq}"], datetime.timedelta(seconds=5))
        if self._pg:  # after a fault, abort: destroying waits on communicators a dead or hung peer may hold
            self.ended = "aborted" if kill else "destroyed"
            try:
                (dist.distributed_c10d._abort_process_group if kill else dist.destroy_process_group)()
            except Exception as e:
                log.debug("LTX TDP: ending the process group: %s", e)
                if dist.is_initialized():
                    dist.destroy_process_group()
            self._pg = False
        stop_processes(list(self.procs.values()), grace_s=0.5 if kill else 5.0)
        self.store = self._server = None


def _pickle(obj: Any, what: str, placeholders: frozenset[int] = frozenset(), band: list | None = None) -> bytes:
    try:
        return W.dumps(obj, placeholders, band)
    except Exception as e:  # nothing was posted: the group is still in step
        raise TDPGroupError(f"LTX TDP: {what} cannot be sent to the worker ranks: {e}. Without tdp_group it "
                            "runs on this machine.") from e
