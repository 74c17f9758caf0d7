"""This checkout as the package `ltx_tdp`, through the pack's one loader (`multigpu/worker_main.py`'s
`import_pack`, which worker ranks use too)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from .paths import PACK_ROOT

PACKAGE = "ltx_tdp"


def import_pack() -> ModuleType:
    """Register the checkout as package `ltx_tdp` (idempotent) and return it."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    spec = importlib.util.spec_from_file_location("ltx_tdp_worker_main", PACK_ROOT / "multigpu" / "worker_main.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    return loader.import_pack()
