"""Headless: an API-format TDP workflow with the launcher runs over `POST /prompt`; a killed worker fails
the next prompt with its rank named, without waiting out the group's timeout (600 s here, far longer than the
240 s the test gives a prompt), and the server then runs the next prompt on fresh workers."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import pytest

from ltx_tdp_devkit.api_prompts import tdp_upscale_prompt
from ltx_tdp_devkit.server import PromptFailed

pytestmark = [pytest.mark.distributed, pytest.mark.server]

_seeds = itertools.count(500)


def _prompt(model_names) -> dict:
    seed = next(_seeds)
    prompt = tdp_upscale_prompt(unet_name=model_names["ltxv"], vae_name=model_names["vae"], width=256, height=256,
                                length=9, seed=seed, filename_prefix=f"tdp_mgpu_{seed}")
    prompt["group"] = {"class_type": "LTXTDPMultiGPULauncher",
                       "inputs": {"ranks": 2, "devices": "", "backend": "auto", "timeout_s": 600,
                                  "address": "127.0.0.1", "port": 0, "external_workers": False}}
    prompt["tdp"]["inputs"]["tdp_group"] = ["group", 0]
    return prompt


def _workers_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if "multigpu/worker_main.py" in cmdline and state != "Z" and int(ppid) == pid:
            out.append(int(entry.name))
    return out


def test_launcher_workflow_runs_and_survives_a_killed_worker(comfy_server, model_names):
    entry = comfy_server.run(_prompt(model_names), timeout=240)
    assert entry["status"]["status_str"] == "success"
    workers = _workers_of(comfy_server.proc.pid)
    assert len(workers) == 1, f"expected one worker of the server, found {workers}"

    os.kill(workers[0], signal.SIGKILL)
    with pytest.raises(PromptFailed) as failure:
        comfy_server.run(_prompt(model_names), timeout=240)
    message = str(failure.value)
    assert "rank 1" in message and "SIGKILL" in message, message
    assert _workers_of(comfy_server.proc.pid) == [], "a worker process was left behind"

    entry = comfy_server.run(_prompt(model_names), timeout=240)
    assert entry["status"]["status_str"] == "success"
    assert len(_workers_of(comfy_server.proc.pid)) == 1, "the next prompt did not start a fresh worker"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_end_when_comfyui_is_killed(comfy_dir, comfy_base, model_names):
    """SIGKILL gives ComfyUI no chance to clean up: the workers notice on their own (their pipe closes)."""
    import sys

    from ltx_tdp_devkit.server import ComfyServer

    server = ComfyServer(comfy_dir=comfy_dir, base_dir=comfy_base, python=sys.executable,
                         log_path=comfy_base / "server_killed.log")
    server.start()
    try:
        server.run(_prompt(model_names), timeout=240)
        workers = _workers_of(server.proc.pid)
        assert workers, "the launcher started no worker"
        os.kill(server.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 120  # a guard against workers that never leave, not a speed limit
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert not left, f"workers {left} outlived the killed ComfyUI (still there after 120 s)"
    finally:
        server.stop()
