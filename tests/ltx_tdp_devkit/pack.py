"""This checkout as the package `ltx_tdp`, through the pack's one loader (`package.py`'s `import_pack`, which
worker ranks use too)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from .paths import PACK_ROOT


def _package() -> ModuleType:
    spec = importlib.util.spec_from_file_location("package", PACK_ROOT / "package.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_PACKAGE_PY = _package()
PACKAGE = _PACKAGE_PY.PACKAGE
"""The pack's package name, as `package.py` spells it."""


def import_pack() -> ModuleType:
    """Register the checkout as package `ltx_tdp` (idempotent) and return it."""
    return _PACKAGE_PY.import_pack()
