"""Fixtures of the LTX Sequence Parallel tests: `core_multigpu` skips where ComfyUI has no in-process MultiGPU
(0.24+; a module asks for it with `pytestmark = pytest.mark.usefixtures("core_multigpu")`), every test runs one
torch thread per device, as on this 2-core machine; `ltxv3` is the tiny LTXV with 3 blocks."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu
from ltx_tdp_devkit.core_multigpu_fixtures import core_multigpu, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.sequence import LTXV_LAYERS, deep_model


@pytest.fixture(scope="session")
def ltxv3(comfy, comfy_base):
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    return deep_model(comfy, comfy_base, "ltxv", LTXV_LAYERS)
