"""A worker leaves no thread inside a torch store call when it returns: Python finalising while a thread is
blocked in TCPStore.add ends that thread by a forced unwind through C++ frames, and the worker dies of
SIGABRT ("terminate called without an active exception") although it had shut down cleanly. Real TCPStore,
in this process."""

from __future__ import annotations

import argparse
import datetime
import time

import torch.distributed as dist

from ltx_tdp_devkit.server import free_port


def test_close_stops_and_joins_the_heartbeat_thread():
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.multigpu.worker import Worker

    assert not dist.is_initialized(), "a process group of an earlier test is live (close() would end it)"
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=10))
    store = dist.PrefixStore(W.PREFIX, server)
    args = argparse.Namespace(rank=1, world_size=2, timeout=10.0, device="cpu", master_addr="127.0.0.1",
                              master_port=port)
    worker = Worker(args)
    worker._heart.start()  # what connect() does once the worker said hello
    deadline = time.monotonic() + 10
    while store.add("hb/1", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.add("hb/1", 0) >= 2, "the heartbeat thread never bumped hb/1"
    started = time.monotonic()
    worker.close()
    assert not worker._heart.is_alive(), "close() returned with the heartbeat thread still running"
    assert time.monotonic() - started < 2 * W.HEARTBEAT_S + 1, "close() waited a heartbeat timeout, not a beat"
    beats = store.add("hb/1", 0)
    time.sleep(3 * W.HEARTBEAT_S)
    assert store.add("hb/1", 0) == beats, "the heartbeat kept beating after close()"


def test_close_of_a_worker_that_never_connected_returns():
    from ltx_tdp.multigpu.worker import Worker

    args = argparse.Namespace(rank=1, world_size=2, timeout=10.0, device="cpu")
    Worker(args).close()  # no heartbeat thread was started: nothing to join, nothing raised
