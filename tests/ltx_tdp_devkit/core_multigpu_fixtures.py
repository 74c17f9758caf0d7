"""Fixtures of the tile path's tests over ComfyUI's in-process MultiGPU (tests/ltx/model/test_core_multigpu*.py).

A test module (or conftest) imports them by name (pytest registers imported fixtures): `core_multigpu`, a skip where
ComfyUI has no in-process MultiGPU (0.24+ has it); `ltxv`, the tiny LTXV loaded by ComfyUI's loader, with that
skip; `one_torch_thread` (autouse), one torch thread per device, as on this 2-core machine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .core_multigpu import SKIP_REASON, has_core_multigpu, torch_threads
from .ltx_helpers import load_ltxv


@pytest.fixture
def core_multigpu(comfy) -> None:
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")


@pytest.fixture(scope="module")
def ltxv(comfy, model_names) -> Any:
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    return load_ltxv(comfy, model_names)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    with torch_threads(1):
        yield
