"""Test support (never shipped): `multigpu/worker_main.py` with a fault injected, chosen by TDP_FAULT:

* `error` (default): its model jobs raise an error of their own (standing in for any failure a real worker
  could meet, e.g. out of memory);
* `stall-mid-ack`: from message 2 on (message 1 is the model replica) it writes its ack, then stops itself
  (SIGSTOP) before counting it, as a worker frozen at that instant would.

Arguments: those of worker_main.py."""

from __future__ import annotations

import importlib
import os
import signal
import sys

from worker_boot import boot

MESSAGE = "injected by the test: this worker cannot run its tiles"


def main() -> int:
    worker_main, worker = boot()
    if os.environ.get("TDP_FAULT", "error") == "stall-mid-ack":
        ack = worker.Worker._ack

        def stall_mid_ack(self, seq: int, error: str) -> None:
            if seq < 2:
                return ack(self, seq, error)
            self.store.set(f"ack/{seq}/{self.rank}", error.encode())  # the ack, as Worker._ack writes it
            os.kill(os.getpid(), signal.SIGSTOP)  # ... and the count never comes

        worker.Worker._ack = stall_mid_ack
    else:
        model_job = importlib.import_module(f"{worker_main.package.PACKAGE}.ltx.model.job")

        def run(self, *a, **kw):
            raise RuntimeError(MESSAGE)

        model_job.ModelJob.run = run
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
