"""The README's first command, `bash scripts/run_example.sh OUT_DIR`: the pack's main job (a TDP upscale through a
headless ComfyUI on a tiny generated LTX model) runs to the end, as a user runs it, and leaves its frames, a GIF
preview and the API prompt it sent in OUT_DIR, and no server behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from ltx_tdp_devkit.paths import PACK_ROOT

pytestmark = pytest.mark.server


def test_the_main_job_command_writes_frames_a_preview_and_its_prompt(comfy_dir: Path, tmp_path: Path):
    out = tmp_path / "tdp_output"
    env = {**os.environ, "COMFYUI_DIR": str(comfy_dir)}  # the tree under test, set up already: no second copy
    proc = subprocess.run(["bash", "scripts/run_example.sh", str(out), "--width", "256", "--height", "192",
                           "--length", "9", "--tiles", "2", "2", "--overlap", "2"],
                          cwd=PACK_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"run_example.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    frames = sorted(out.glob("frame_*.png"))
    assert len(frames) == 9, f"expected 9 frames, got {[f.name for f in frames]}"
    assert Image.open(frames[0]).size == (256, 192), f"frame size {Image.open(frames[0]).size}"
    assert (out / "ltx_tdp_example.gif").stat().st_size > 0, "no GIF preview"
    prompt = json.loads((out / "workflow_api.json").read_text())
    patchers = [n for n in prompt.values() if n["class_type"] == "LTXTDPModelPatcher"]
    assert patchers, "the prompt it sent has no TDP patcher"
    base_dirs = [line for line in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
                 if "ltx-tdp-example." in line and "main.py" in line]
    assert not base_dirs, f"a ComfyUI server of the example is still running: {base_dirs}"
