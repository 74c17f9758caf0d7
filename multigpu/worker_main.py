"""Entry script of worker ranks: `--rank R` runs one rank in this process; `--gpus N --first-rank F` starts
that host's N ranks with torch's `start_processes` (docs/multi-gpu.md: other hosts, and why not torchrun).

This script, not the pack, touches sys.path: it puts ComfyUI's directory first (to import its model
code without starting a server) and registers the pack directory as a package with the pack's one loader
(`package.py`'s `import_pack`, loaded here by its path).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
EXIT_TERMINATED = 143


def _load_package() -> ModuleType:
    """The pack's `package.py` (its name and loader), loaded by its path: the pack is not importable yet."""
    spec = importlib.util.spec_from_file_location("package", HERE.parent / "package.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package = _load_package()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="LTX TDP worker rank: joins a ComfyUI (rank 0) over torch.distributed.")
    p.add_argument("--comfyui-dir", required=True, help="the ComfyUI directory (holds comfy/ and main.py)")
    p.add_argument("--rank", type=int, default=None, help="run one rank, 1 .. world-size - 1, here (wins over --gpus, "
                   "which starts its ranks with these arguments plus --rank)")
    p.add_argument("--gpus", type=int, default=0, help="start this many local ranks, one per GPU (or per --device)")
    p.add_argument("--first-rank", type=int, default=1, help="the rank of the first of the --gpus local ranks")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks, ComfyUI (rank 0) included")
    p.add_argument("--master-addr", default="127.0.0.1", help="address of the ComfyUI host (its launcher's address)")
    p.add_argument("--master-port", type=int, required=True, help="the launcher's port")
    p.add_argument("--device", default="auto", help="cuda:N or cpu (auto: cuda:$LOCAL_RANK when there is a GPU)")
    p.add_argument("--log-dir", default=None, help="with --gpus: where each rank's output goes (default: this console)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for rank 0 and for each collective")
    p.add_argument("--bind-address", help="local address gloo/NCCL bind to (default: the one reaching master-addr)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--rejoin", action="store_true", help="after the group ends, wait for rank 0's next one")
    p.add_argument("--parent-pipe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank is None and args.gpus < 1:
        p.error("give --rank (one rank) or --gpus N (N local ranks)")
    first, last = (args.rank, args.rank) if args.rank is not None else (args.first_rank, args.first_rank + args.gpus - 1)
    if not 1 <= first <= last < args.world_size:
        p.error(f"ranks {first}..{last} must lie between 1 and {args.world_size - 1} (rank 0 is ComfyUI)")
    return args


def start_local_ranks(args: argparse.Namespace, argv: list[str]) -> int:
    """--gpus N: one process per local rank through torch's start_processes; waits for all of them. The
    exit code is 0 when every rank ended cleanly, else the first failure's."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

    ranks = range(args.first_rank, args.first_rank + args.gpus)
    cmd_args = {i: (str(HERE / "worker_main.py"), *argv, "--rank", str(r)) for i, r in enumerate(ranks)}
    envs = {i: {"LOCAL_RANK": str(i), "RANK": str(r), "WORLD_SIZE": str(args.world_size), "MASTER_ADDR":
                args.master_addr, "MASTER_PORT": str(args.master_port), "PYTHONUNBUFFERED": "1"}
            for i, r in enumerate(ranks)}
    logs = DefaultLogsSpecs(log_dir=args.log_dir, redirects=Std.ALL if args.log_dir else Std.NONE)
    context = start_processes(f"{package.PACKAGE}_worker", sys.executable, cmd_args, envs, logs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_TERMINATED))  # run `finally`: end the local ranks
    try:
        result = context.wait()
        failures = result.failures if result is not None else {}
        for i, f in sorted(failures.items()):
            logging.error("local rank %d (rank %d) failed with exit code %s", i, ranks[i], f.exitcode)
        return next((f.exitcode for _, f in sorted(failures.items())), 0)
    finally:
        context.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
        sys.path.pop(0)  # this folder's modules must not shadow top-level names
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [LTX TDP rank {args.rank if args.rank is not None else 'host'}] "
                        "%(levelname)s %(message)s")
    if args.rank is None:
        return start_local_ranks(args, argv)
    comfyui_dir = Path(args.comfyui_dir).resolve()
    if not (comfyui_dir / "comfy").is_dir():
        logging.error("%s is not a ComfyUI directory (no comfy/ inside)", comfyui_dir)
        return 2
    sys.path.insert(0, str(comfyui_dir))  # ComfyUI's model code, without starting a server
    package.import_pack()
    worker = importlib.import_module(f"{package.PACKAGE}.multigpu.worker")
    launch = importlib.import_module(f"{package.PACKAGE}.multigpu.launch")
    if args.parent_pipe:
        worker.watch_parent_pipe()
    bind = args.bind_address or launch.local_ip_towards(args.master_addr, args.master_port)
    for key, value in launch.bind_env(bind).items():
        os.environ.setdefault(key, value)
    while True:
        try:
            code = worker.run(args)
        except Exception:
            if not args.rejoin:
                raise
            logging.exception("the group ended with an error")
            code = None
        if not args.rejoin:
            return code
        logging.info("waiting for rank 0 at %s:%d to start a new group", args.master_addr, args.master_port)
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
