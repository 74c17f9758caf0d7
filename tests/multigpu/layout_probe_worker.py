"""Test support (never shipped): `multigpu/worker_main.py` that records, for every model job, what each
Linear layer of its model replica computes with at forward time: the comfy-kitchen layout of a
QuantizedTensor weight, or "plain". One JSON line ({layer: layout} of the layers that ran) per job is
appended to the file named by $TDP_PROBE_OUT. Arguments: those of worker_main.py."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

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

    def probed(self, msg):
        seen: dict[str, str] = {}
        hooks = []
        replica = self.replicas.get("model", (None, None))[1]
        for name, m in (replica.module.named_modules() if replica is not None else ()):
            if isinstance(m, __import__("torch").nn.Linear) or type(m).__name__ == "Linear":
                def record(mod, _inputs, name=name):
                    w = mod.weight
                    seen[name] = getattr(w, "_layout_cls", None) or "plain"
                hooks.append(m.register_forward_pre_hook(record))
        try:
            after = job(self, msg)
        finally:
            for h in hooks:
                h.remove()
        with out.open("a") as f:
            f.write(json.dumps(seen) + "\n")
        return after

    worker.Worker._job = probed
    return worker_main.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
