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


def comfyui_has_ltx25(comfy_dir: Path | None = None) -> bool:
    """Whether the ComfyUI tree (default: the one under test) has LTX-2.5's transformer (its keyframe marker,
    ComfyUI >= 0.32), read from the source without importing ComfyUI (tiny_models.has_ltx25 asks the classes
    of the ComfyUI imported in this process)."""
    comfy_dir = comfy_dir or comfyui_dir()
    model = comfy_dir / "comfy" / "ldm" / "lightricks" / "model.py" if comfy_dir else None
    return model is not None and model.is_file() and "use_keyframes_abs_pos_embedding" in model.read_text(errors="replace")


def gguf_pack_dir() -> Path | None:
    """city96's ComfyUI-GGUF custom node pack (read-only, never copied): $LTX_TDP_GGUF_DIR, else
    PACK_ROOT/../shared/comfyui-gguf; None when neither holds the pack (its `nodes.py`)."""
    value = os.environ.get("LTX_TDP_GGUF_DIR")
    path = Path(value) if value else PACK_ROOT.parent / "shared" / "comfyui-gguf"
    return path.resolve() if (path / "nodes.py").is_file() else None
