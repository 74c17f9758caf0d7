"""Starting worker processes and binding sockets to the configured address only.

Workers are plain subprocesses (`python <pack>/multigpu/worker_main.py ...`), each in its own session
(process group), never multiprocessing children of ComfyUI's main. Each holds the read end of a pipe
from rank 0 on its stdin: when rank 0 ends, however it ends, the pipe closes and the worker exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PACK_DIR = Path(__file__).resolve().parents[1]
WORKER_MAIN = PACK_DIR / "multigpu" / "worker_main.py"


def resolve_ipv4(address: str) -> str:
    """The IPv4 address `address` (a name or an address) stands for."""
    try:
        return socket.getaddrinfo(address, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        from .settings import TDPGroupError

        raise TDPGroupError(f"cannot resolve the rendezvous address {address!r}: {e}") from None


def interface_of(ip: str) -> str | None:
    """The network interface holding `ip` (so gloo / NCCL bind to it), or None (0.0.0.0, or unknown)."""
    if ip in ("0.0.0.0", ""):
        return None
    try:
        import psutil
    except ImportError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def local_ip_towards(address: str, port: int) -> str:
    """The local IPv4 address this host uses to reach `address` (no packet is sent)."""
    ip = resolve_ipv4(address)
    if ip.startswith("127."):
        return ip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((ip, port or 9))
        return s.getsockname()[0]


def bind_env(ip: str) -> dict[str, str]:
    """Environment that makes gloo and NCCL use the interface of `ip` (empty when it cannot be told)."""
    name = interface_of(ip)
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name} if name else {}


def listen_socket(address: str, port: int) -> socket.socket:
    """A listening TCP socket on exactly (address, port); port 0 picks a free one."""
    ip = resolve_ipv4(address)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((ip, port))
    except OSError as e:
        sock.close()
        from .settings import TDPGroupError

        raise TDPGroupError(f"cannot listen on {address}:{port} for the worker group: {e}") from None
    sock.listen(128)
    return sock


def worker_command(comfyui_dir: Path, rank: int, world_size: int, master_addr: str, master_port: int,
                   device: str, timeout_s: float, threads: int = 0, python: str | None = None) -> list[str]:
    """The command line that starts worker `rank` (the same one the README documents for other hosts)."""
    cmd = [python or sys.executable, str(WORKER_MAIN), "--comfyui-dir", str(comfyui_dir), "--rank", str(rank),
           "--world-size", str(world_size), "--master-addr", master_addr, "--master-port", str(master_port),
           "--device", device, "--timeout", str(timeout_s)]
    if threads:
        cmd += ["--threads", str(threads)]
    return cmd


def spawn_worker(cmd: list[str], env_extra: dict[str, str]) -> subprocess.Popen:
    """Start one worker in its own session, its stdin a pipe from this process (EOF ends the worker)."""
    env = dict(os.environ)
    for k, v in env_extra.items():
        env.setdefault(k, v)  # a user's own GLOO_/NCCL_SOCKET_IFNAME wins
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.Popen(cmd + ["--parent-pipe"], stdin=subprocess.PIPE, env=env, start_new_session=True,
                            close_fds=True)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "is running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """Close the pipes, wait up to `grace_s`, then SIGKILL each worker's process group. Leaves none behind."""
    import time

    for p in procs:
        try:
            if p.stdin is not None:
                p.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.05))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is not None:
            continue
        for target in (lambda: os.killpg(p.pid, signal.SIGKILL), lambda: p.kill()):
            try:
                target()
            except (ProcessLookupError, PermissionError, OSError):
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("LTX TDP: worker pid %d did not end after SIGKILL", p.pid)
