"""Starting, diagnosing and ending worker processes, and binding sockets to the configured address only.

Local workers are `worker_main.py` subprocesses, each in its own process group, holding the read end of a
pipe from rank 0 on stdin: when rank 0 ends, however it ends, the pipe closes and the worker exits.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import wire as W
from .devices import worker_device_env
from .nccl import RANK0_NCCL_ENV, join_group, set_rank0_nccl_env
from .settings import GroupSettings, TDPGroupError
from .wire import HEARTBEAT_S, WorkerConfig

log = logging.getLogger(__name__)

WORKER_MAIN = Path(__file__).resolve().parent / "worker_main.py"


def resolve_ipv4(address: str) -> str:
    """The IPv4 address `address` (a name or an address) stands for."""
    try:
        return socket.getaddrinfo(address, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        raise TDPGroupError(f"cannot resolve the rendezvous address {address!r}: {e}") from None


def interface_of(ip: str) -> str | None:
    """The network interface holding `ip` (so gloo / NCCL bind to it), or None (0.0.0.0, or unknown)."""
    try:
        import psutil
    except ImportError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if ip not in ("0.0.0.0", "") and any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def local_ip_towards(address: str, port: int) -> str:
    """The local IPv4 address this host uses to reach `address` (no packet is sent; loopback for loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((resolve_ipv4(address), port or 9))
        return s.getsockname()[0]


def bind_env(ip: str) -> dict[str, str]:
    """Environment that makes gloo and NCCL use the interface of `ip` (empty when it cannot be told)."""
    name = interface_of(ip)
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name} if name else {}


def listen_socket(address: str, port: int) -> socket.socket:
    """A listening TCP socket on exactly (address, port); port 0 picks a free one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((resolve_ipv4(address), port))
    except OSError as e:
        sock.close()
        raise TDPGroupError(f"cannot listen on {address}:{port} for the worker group: {e}") from None
    sock.listen(128)
    return sock


def worker_command(s: GroupSettings, port: int, r: int, root: Path) -> tuple[list[str], dict[str, str]]:
    """(command, environment) of local worker rank `r` of `s`: the command docs/multi-gpu.md documents for other
    hosts (ComfyUI in `root`), and ComfyUI's environment with this worker's GPU made its only visible one
    (multigpu.devices: a ComfyUI started with --cuda-device N would otherwise hand every worker GPU N)."""
    device, device_env = worker_device_env(s.devices[r])
    cmd = [sys.executable, str(WORKER_MAIN), "--comfyui-dir", str(root), "--rank", str(r), "--world-size",
           str(s.world_size), "--master-addr", s.address, "--master-port", str(port), "--device", device,
           "--timeout", str(s.timeout_s)] + (["--threads", str(s.threads)] if s.threads else [])
    env = {**bind_env(resolve_ipv4(s.address)), **os.environ, **device_env, "PYTHONUNBUFFERED": "1"}  # the user's own *_IFNAME wins
    return cmd, env


def start_local_workers(s: GroupSettings, port: int, on_exit: Callable[[int], None]) -> dict[int, subprocess.Popen]:
    """Ranks 1..N-1 of `s` on this host; a daemon thread per worker calls `on_exit(rank)` when it ends."""
    import comfy.model_base

    root = Path(comfy.model_base.__file__).resolve().parents[1]
    procs = {}
    for r in range(1, s.world_size):
        cmd, env = worker_command(s, port, r, root)
        procs[r] = subprocess.Popen(cmd + ["--parent-pipe"], stdin=subprocess.PIPE, env=env, start_new_session=True,
                                    close_fds=True)
        log.debug("LTX TDP: started rank %d (pid %d, %s): %s", r, procs[r].pid, s.devices[r], " ".join(cmd))
        threading.Thread(target=lambda r=r, p=procs[r]: (p.wait(), on_exit(r)), name=f"ltx-tdp-watch-{r}",
                         daemon=True).start()
    return procs


def wait_hellos(session: Any) -> dict[int, dict]:
    """Wait for every worker's hello (at least STARTUP_MIN_S); rank -> its hello. Raises TDPGroupError naming
    the ranks that did not start, or the local worker that exited while starting."""
    s, wait_s = session.settings, max(session.settings.timeout_s, W.STARTUP_MIN_S)
    keys = [f"hello/{r}" for r in session.workers]
    try:
        session.store.wait(keys, datetime.timedelta(seconds=wait_s))
    except dist.DistStoreError:
        missing = [r for r, k in zip(session.workers, keys) if not session.store.check([k])]
        how = ("were not started on the other host(s): start them with multigpu/worker_main.py (--master-addr "
               f"{s.address} --master-port {session.port})" if s.external_workers else "did not start")
        raise TDPGroupError(f"LTX TDP: rank(s) {', '.join(map(str, missing))} {how} within {wait_s:.0f} s") from None
    hellos = {}
    for r, value in zip(session.workers, session.store.multi_get(keys)):
        if not value:
            p = session.procs[r]
            raise TDPGroupError(f"LTX TDP: worker rank {r} (pid {p.pid}, {s.devices[r]}) "
                                f"{describe_exit(p.wait())} while starting; its log is in the ComfyUI console")
        hellos[r] = W.loads(value)
    check_versions(hellos, worker_config(s))
    return hellos


def init_process_group(session: Any, server: Any) -> dict[str, str | None]:
    """Join rank 0 to the process group on `server` (the group's TCPStore) with RANK0_NCCL_ENV in force, gloo
    bound to the configured address, NCCL's communicator built now (multigpu.nccl); the NCCL variables as
    init_process_group saw them."""
    if dist.is_initialized():
        raise TDPGroupError("LTX TDP: torch.distributed is already initialised in this ComfyUI process "
                            "(by another node?); the multi-GPU group cannot start")
    set_rank0_nccl_env()
    name = interface_of(resolve_ipv4(session.settings.address))
    own = name is not None and "GLOO_SOCKET_IFNAME" not in os.environ
    if own:  # gloo binds to the configured address only (read while the group is created)
        os.environ["GLOO_SOCKET_IFNAME"] = name
    if name is not None and session.settings.backend == "nccl":
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)  # NCCL reads it later, at its first collective
    env_at_init = {k: os.environ.get(k) for k in RANK0_NCCL_ENV}
    try:
        join_group(session.settings.backend, dist.PrefixStore("pg", server), 0, session.world,
                   session.settings.timeout_s, torch.device(session.settings.rank0_device))
    finally:
        if own:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
    return env_at_init


def describe_exit(code: int | None) -> str:
    """A process's `returncode` in words: "is running", "exited with code 1", "was killed by SIGKILL"."""
    if code is None or code >= 0:
        return "is running" if code is None else f"exited with code {code}"
    return f"was killed by {signal.Signals(-code).name if -code in signal.valid_signals() else f'signal {-code}'}"


def where(session: Any, r: int) -> str:
    """Rank r's process, host and device, in words (a local worker's device by its machine name)."""
    h = session.hellos.get(r, {})
    pid = session.procs[r].pid if r in session.procs else h.get("pid", "?")
    device = session.settings.devices[r] if r in session.procs else h.get("device", session.settings.devices[r])
    return f"pid {pid} on {h.get('host', '?')}, {device}"


def diagnose(session: Any, exc: BaseException | None, missing: set[int]) -> list[str]:
    """Which workers of `session` failed, in words: local ones that exited (given 2 s to be seen exiting
    after a broken collective), else the silent ones (`missing` acks, else after a failed collective or wait,
    a stopped heartbeat), else the collective's own error."""
    deadline = time.monotonic() + (2.0 if exc is not None else 0.0)
    while time.monotonic() < deadline and all(p.poll() is None for p in session.procs.values()):
        time.sleep(0.05)
    exited = [f"rank {r} ({where(session, r)}) {describe_exit(p.poll())}" for r, p in sorted(session.procs.items())
              if p.poll() is not None]
    if exited:
        return exited
    try:
        silent = sorted(missing) or (_silent_ranks(session.store, session.workers) if exc is not None else [])
    except Exception:  # the store itself is broken
        silent = []
    return [f"rank {r} ({where(session, r)}) stopped answering (no ack or heartbeat within the "
            f"{session.settings.timeout_s:.0f} s timeout)" for r in silent] or [
        f"a collective failed ({str(exc).splitlines()[0] if exc else '?'})"]


def _silent_ranks(store: Any, ranks: list[int]) -> list[int]:
    """The ranks whose heartbeat does not move within 2.5 heartbeats (blocks that long)."""
    before = [store.add(f"hb/{r}", 0) for r in ranks]
    time.sleep(2.5 * HEARTBEAT_S)
    return [r for r, b in zip(ranks, before) if store.add(f"hb/{r}", 0) == b]


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """Close the pipes, wait up to `grace_s`, then SIGKILL each worker's process group. Leaves none behind."""
    for p in procs:
        with contextlib.suppress(OSError):
            if p.stdin is not None:
                p.stdin.close()
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(deadline - time.monotonic(), 0.05))
    for p in procs:
        if p.poll() is None:
            for kill in (lambda: os.killpg(p.pid, signal.SIGKILL), p.kill):
                with contextlib.suppress(OSError):
                    kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("LTX TDP: worker pid %d did not end after SIGKILL", p.pid)


def worker_config(s: GroupSettings) -> WorkerConfig:
    """What rank 0 publishes for its workers: its settings, ComfyUI arguments (less the device) and versions."""
    import comfy.cli_args
    import comfyui_version

    skip = {"cpu", "cuda_device", "default_device", "directml", "oneapi_device_selector", "listen", "port"}
    args = {k: v for k, v in vars(comfy.cli_args.args).items() if k not in skip}
    return WorkerConfig(s.world_size, s.backend, s.timeout_s, s.devices, args, __package__.rsplit(".", 1)[0],
                        comfyui_version.__version__, torch.__version__)


def check_versions(hellos: dict[int, dict], mine: WorkerConfig) -> None:
    """Warn about workers whose ComfyUI or torch differ from rank 0's (their replicas may compute differently)."""
    for r, h in sorted(hellos.items()):
        if (h.get("comfy_version"), h.get("torch_version")) != (mine.comfy_version, mine.torch_version):
            log.warning("LTX TDP: rank %d runs ComfyUI %s / torch %s; rank 0 runs %s / %s. Replicas may differ.",
                        r, h.get("comfy_version"), h.get("torch_version"), mine.comfy_version, mine.torch_version)
