"""The pack as a Python package: its one name (`PACKAGE`) and its one loader (`import_pack`).

ComfyUI imports this folder under the folder's name. Worker ranks (`multigpu/worker_main.py`), the test kit and
the benchmarks register it as `PACKAGE` instead, through `import_pack`. This file imports nothing of the pack, so a
script can load it by its path before the pack is importable.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "ltx_tdp"
"""The package name of the pack outside ComfyUI's loader (worker ranks, tests, benchmarks); also its name in
ComfyUI's wrapper keys and the group's store keys."""

PACK_DIR = Path(__file__).resolve().parent


def import_pack() -> ModuleType:
    """Register the pack's directory as the package `PACKAGE` (as ComfyUI's loader imports a custom node folder)
    and return it. Idempotent: a second call returns the registered package."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    spec = importlib.util.spec_from_file_location(PACKAGE, PACK_DIR / "__init__.py",
                                                  submodule_search_locations=[str(PACK_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module
