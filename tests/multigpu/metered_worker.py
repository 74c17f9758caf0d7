"""Test support (never shipped): `multigpu/worker_main.py` whose decode jobs run under the tiled-decode
tests' live-tensor meter (ltx_tdp_devkit.memory.PeakTensorBytes). Each decode job's peak
is appended (one line, bytes) to the file named by $TDP_METER_OUT. Arguments: those of worker_main.py."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACK = TESTS.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    sys.path.pop(0)  # this folder must not shadow top-level modules
    worker_main = _load("tdp_worker_main", PACK / "multigpu" / "worker_main.py")
    args = worker_main.parse_args(sys.argv[1:])
    sys.path.insert(0, str(Path(args.comfyui_dir).resolve()))  # ComfyUI's model code, as worker_main.main does
    worker_main.import_pack()
    meter = _load("tdp_memory", TESTS / "ltx_tdp_devkit" / "memory.py").PeakTensorBytes
    worker = importlib.import_module(f"{worker_main.PACKAGE}.multigpu.worker")
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
