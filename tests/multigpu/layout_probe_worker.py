"""Test support (never shipped): `multigpu/worker_main.py` that records, for every job, what each Linear of
its model replica computes with at forward time (ltx_tdp_devkit.tiny_quant.LayoutRecorder: the layout of a
QuantizedTensor weight, or "plain"). One JSON line ({layer: layout} of the layers that ran) per job is
appended to the file named by $TDP_PROBE_OUT. Arguments: those of worker_main.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from worker_boot import TESTS, boot, load_file


def main() -> int:
    worker_main, worker = boot()
    job, out = worker.Worker._job, Path(os.environ["TDP_PROBE_OUT"])
    tiny_quant = load_file("tdp_tiny_quant", TESTS / "ltx_tdp_devkit" / "tiny_quant.py")
    recorder = tiny_quant.LayoutRecorder

    def probed(self, msg):
        replica = self.replicas.get("model", (None, None))[1]
        with recorder(replica.module if replica is not None else torch.nn.Module()) as seen:
            after = job(self, msg)
        with out.open("a") as f:
            f.write(json.dumps(seen) + "\n")
        return after

    worker.Worker._job = probed
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
