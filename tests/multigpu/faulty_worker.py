"""Test support (never shipped): `multigpu/worker_main.py` whose model jobs raise an error of their own on
this worker (standing in for any failure a real worker could meet, e.g. out of memory). Arguments: those
of worker_main.py."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

PACK = Path(__file__).resolve().parents[2]
MESSAGE = "injected by the test: this worker cannot run its tiles"


def main() -> int:
    sys.path.pop(0)  # this folder must not shadow top-level modules
    spec = importlib.util.spec_from_file_location("tdp_worker_main", PACK / "multigpu" / "worker_main.py")
    worker_main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker_main)
    args = worker_main.parse_args(sys.argv[1:])
    worker_main.register_pack(Path(args.comfyui_dir).resolve())
    model_job = importlib.import_module(f"{worker_main.PACKAGE}.ltx.model_job")

    def run(self, *a, **kw):
        raise RuntimeError(MESSAGE)

    model_job.ModelJob.run = run
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
