"""Test support (never shipped): `multigpu/worker_main.py` with a fault injected, chosen by TDP_FAULT:

* `error` (default): its model jobs raise an error of their own (standing in for any failure a real worker
  could meet, e.g. out of memory);
* `stall-mid-ack`: from message 2 on (message 1 is the model replica) it writes its ack, then stops itself
  (SIGSTOP) before counting it, as a worker frozen at that instant would.

Arguments: those of worker_main.py."""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
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
    sys.path.insert(0, str(Path(args.comfyui_dir).resolve()))  # ComfyUI's model code, as worker_main.main does
    worker_main.import_pack()
    if os.environ.get("TDP_FAULT", "error") == "stall-mid-ack":
        worker = importlib.import_module(f"{worker_main.PACKAGE}.multigpu.worker")
        ack = worker.Worker._ack

        def stall_mid_ack(self, seq: int, error: str) -> None:
            if seq < 2:
                return ack(self, seq, error)
            self.store.set(f"ack/{seq}/{self.rank}", error.encode())  # the ack, as Worker._ack writes it
            os.kill(os.getpid(), signal.SIGSTOP)  # ... and the count never comes

        worker.Worker._ack = stall_mid_ack
    else:
        model_job = importlib.import_module(f"{worker_main.PACKAGE}.ltx.model.job")

        def run(self, *a, **kw):
            raise RuntimeError(MESSAGE)

        model_job.ModelJob.run = run
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
