"""Test support (never shipped): `multigpu/worker_main.py` whose decode jobs run under the tiled-decode
tests' live-tensor meter (ltx_tdp_devkit.memory.PeakTensorBytes). Each decode job's peak
is appended (one line, bytes) to the file named by $TDP_METER_OUT. Arguments: those of worker_main.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from worker_boot import TESTS, boot, load_file


def main() -> int:
    worker_main, worker = boot()
    meter = load_file("tdp_memory", TESTS / "ltx_tdp_devkit" / "memory.py").PeakTensorBytes
    gather, out = worker.Worker._gather, Path(os.environ["TDP_METER_OUT"])

    def metered(self, *a, **kw):
        counter = meter()
        with counter:
            result = gather(self, *a, **kw)
        with out.open("a") as f:
            f.write(f"{counter.peak}\n")
        return result

    worker.Worker._gather = metered
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
