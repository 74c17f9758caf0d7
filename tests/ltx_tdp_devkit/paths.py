"""Where the pack, its tests and the ComfyUI under test live."""

from __future__ import annotations

import os
from pathlib import Path

PACK_ROOT = Path(__file__).resolve().parents[2]
TESTS_ROOT = PACK_ROOT / "tests"
TEST_NODE_PACK = TESTS_ROOT / "test_node_pack"
API_WORKFLOWS = TESTS_ROOT / "example_workflows" / "api"


def comfyui_dir() -> Path | None:
    """The ComfyUI tree under test: $COMFYUI_DIR, else the one scripts/env.sh prepared ($TDP_COMFYUI_DIR)."""
    for var in ("COMFYUI_DIR", "TDP_COMFYUI_DIR"):
        value = os.environ.get(var)
        if value and (Path(value) / "main.py").is_file():
            return Path(value).resolve()
    return None
