"""A worker leaves no thread inside a torch store call when it returns: Python finalising while a thread is
blocked in TCPStore.add ends that thread by a forced unwind through C++ frames, and the worker dies of
SIGABRT ("terminate called without an active exception") although it had shut down cleanly. Real TCPStore,
in this process."""

from __future__ import annotations

import argparse
import datetime
import threading

import torch.distributed as dist

from ltx_tdp_devkit.server import free_port


def test_close_wakes_and_joins_the_heartbeat_thread(monkeypatch):
    """The heartbeat sleeps on an event that close() sets: with a beat every hour, close() still returns at once
    and the thread has ended. (A close() that waited out the beat would block for an hour; the 120 s join below
    is only a guard against that hang, 30 times shorter, not a speed requirement.)"""
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.multigpu.worker import Worker

    assert not dist.is_initialized(), "a process group of an earlier test is live (close() would end it)"
    monkeypatch.setattr(W, "HEARTBEAT_S", 3600.0)
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=10))
    store = dist.PrefixStore(W.PREFIX, server)
    args = argparse.Namespace(rank=1, world_size=2, timeout=10.0, device="cpu", master_addr="127.0.0.1",
                              master_port=port)
    worker = Worker(args)
    worker._heart.start()  # what connect() does once the worker said hello
    store.wait(["hb/1"], datetime.timedelta(seconds=120))  # the first beat: the thread now waits an hour
    closing = threading.Thread(target=worker.close)
    closing.start()
    closing.join(timeout=120)
    assert not closing.is_alive(), "close() is still waiting: it did not wake the heartbeat thread"
    assert not worker._heart.is_alive(), "close() returned with the heartbeat thread still running"
    assert store.add("hb/1", 0) == 1, "the heartbeat beat again after close()"


def test_close_of_a_worker_that_never_connected_returns():
    from ltx_tdp.multigpu.worker import Worker

    args = argparse.Namespace(rank=1, world_size=2, timeout=10.0, device="cpu")
    Worker(args).close()  # no heartbeat thread was started: nothing to join, nothing raised
