"""Test support (never shipped): the start shared by the instrumented copies of `multigpu/worker_main.py` in this
folder (faulty_worker.py, metered_worker.py, layout_probe_worker.py), before each patches in its instrument."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
PACK = TESTS.parent


def load_file(name: str, path: Path) -> ModuleType:
    """The module at `path`, loaded under `name` without touching sys.path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boot() -> tuple[ModuleType, ModuleType]:
    """Prepare this process as `worker_main.main` would, up to importing the pack: this folder leaves sys.path
    (it must not shadow top-level modules), ComfyUI's tree (from `--comfyui-dir` in argv) joins it. Returns the
    pack's worker_main module and its `multigpu.worker` module, whose methods an instrument may replace before
    calling `worker_main.main(sys.argv[1:])`."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    worker_main = load_file("tdp_worker_main", PACK / "multigpu" / "worker_main.py")
    args = worker_main.parse_args(sys.argv[1:])
    sys.path.insert(0, str(Path(args.comfyui_dir).resolve()))  # ComfyUI's model code, as worker_main.main does
    worker_main.package.import_pack()
    return worker_main, importlib.import_module(f"{worker_main.package.PACKAGE}.multigpu.worker")
