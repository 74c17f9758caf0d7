"""bench/bench_vae_decode_devices.py at its tiny size: it runs on 2 (faked) devices against 1 and reports the
decode on 2 devices equal to 1 device's bit for bit, for every decoder this ComfyUI builds.

HARDWARE MOCK: the benchmark makes ComfyUI's device enumeration report cpu and cpu:1
(ltx_tdp_devkit.core_multigpu.fake_devices); everything else is real."""

from __future__ import annotations

import re
import sys

import pytest

from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu
from ltx_tdp_devkit.paths import PACK_ROOT


def test_the_tiny_benchmark_reports_two_devices_equal_to_one(comfy):
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    from ltx_tdp_devkit import real_vae

    if not real_vae.builds_ltx2_vae():
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} cannot build the LTX-2 VAE")
    sys.path.insert(0, str(PACK_ROOT / "bench"))
    try:
        import bench_vae_decode_devices as bench
    finally:
        sys.path.remove(str(PACK_ROOT / "bench"))
    text = bench.run_all("tiny", runs=1)
    rows = re.findall(r"^\| (.+?) \| .+? \| 2 devices \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| (\S+) \|$", text, re.M)
    assert rows and rows[0][0] == "tiny LTX VAE", f"no 2-device rows in the report:\n{text}"
    assert all(float(diff) == 0 for _, diff in rows), f"2 devices differ from 1:\n{text}"
