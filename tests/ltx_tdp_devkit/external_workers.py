"""External test workers: rank 1 of 2, started by hand as on another host, running one of the instrumented
copies of `multigpu/worker_main.py` in tests/multigpu (faulty_worker.py, metered_worker.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .paths import PACK_ROOT


def start_test_worker(script: str, comfy_dir: Path, port: int, timeout_s: float, **env: str) -> subprocess.Popen:
    """tests/multigpu/`script` as rank 1 of a 2-rank CPU group whose rank 0 listens on 127.0.0.1:`port`, in its
    own process session, with `env` added to this process's environment; one torch thread, like the groups
    of tests/multigpu/conftest.py."""
    cmd = [sys.executable, str(PACK_ROOT / "tests" / "multigpu" / script), "--comfyui-dir", str(comfy_dir),
           "--rank", "1", "--world-size", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
           "--device", "cpu", "--timeout", str(timeout_s), "--threads", "1"]
    return subprocess.Popen(cmd, env={**os.environ, **env}, start_new_session=True)
