"""Import this checkout as the package `ltx_tdp`, the way ComfyUI's loader imports a custom node folder."""

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
    spec = importlib.util.spec_from_file_location(
        PACKAGE, PACK_ROOT / "__init__.py", submodule_search_locations=[str(PACK_ROOT)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module
