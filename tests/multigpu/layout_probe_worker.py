"""Test support (never shipped): `multigpu/worker_main.py` that records, for every job, what each Linear of
its model replica computes with at forward time (ltx_tdp_devkit.tiny_quant.LayoutRecorder: the layout of a
QuantizedTensor weight, or "plain"). One JSON line ({layer: layout} of the layers that ran) per job is
appended to the file named by $TDP_PROBE_OUT. Arguments: those of worker_main.py."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

PACK = Path(__file__).resolve().parents[2]


def main() -> int:
    sys.path.pop(0)  # this folder must not shadow top-level modules
    spec = importlib.util.spec_from_file_location("tdp_worker_main", PACK / "multigpu" / "worker_main.py")
    worker_main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker_main)
    args = worker_main.parse_args(sys.argv[1:])
    sys.path.insert(0, str(Path(args.comfyui_dir).resolve()))  # ComfyUI's model code, as worker_main.main does
    worker_main.import_pack()
    worker = importlib.import_module(f"{worker_main.PACKAGE}.multigpu.worker")
    job, out = worker.Worker._job, Path(os.environ["TDP_PROBE_OUT"])
    spec = importlib.util.spec_from_file_location("tdp_tiny_quant", PACK / "tests" / "ltx_tdp_devkit" / "tiny_quant.py")
    tiny_quant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_quant)
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
