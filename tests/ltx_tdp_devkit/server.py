"""A headless ComfyUI server with this pack installed, for tests and the example command.

Started on a free loopback port in its own process group, waited for, and always torn down: no process
outlives the session.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

PACK_DIR_NAME = "ltx_tdp"
TEST_PACK_DIR_NAME = "tdp_test_nodes"


class PromptFailed(RuntimeError):
    """A prompt that ComfyUI refused (validation) or that failed while running."""

    def __init__(self, message: str, details: Any = None):
        super().__init__(message)
        self.details = details


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_base_dir(base: Path, pack_root: Path, test_pack: Path | None, models: dict[str, Path]) -> Path:
    """Lay out a ComfyUI base directory: custom_nodes links to the pack (and test pack), model files in
    models/<folder>/<name>. `models` maps "folder/name" to a file."""
    (base / "custom_nodes").mkdir(parents=True, exist_ok=True)
    links = {PACK_DIR_NAME: pack_root}
    if test_pack is not None:
        links[TEST_PACK_DIR_NAME] = test_pack
    for name, target in links.items():
        link = base / "custom_nodes" / name
        if not link.exists():
            link.symlink_to(target, target_is_directory=True)
    for rel, src in models.items():
        dst = base / "models" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            dst.symlink_to(src)
    for sub in ("input", "output", "temp", "user"):
        (base / sub).mkdir(exist_ok=True)
    return base


@dataclass
class ComfyServer:
    comfy_dir: Path
    base_dir: Path
    python: str = sys.executable
    port: int = 0
    log_path: Path | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> "ComfyServer":
        self.port = self.port or free_port()
        self.log_path = self.log_path or (self.base_dir / "server.log")
        cmd = [
            self.python, str(self.comfy_dir / "main.py"), "--cpu", "--listen", "127.0.0.1",
            "--port", str(self.port), "--base-directory", str(self.base_dir),
            "--use-pytorch-cross-attention", "--dont-print-server", "--disable-auto-launch",
            "--disable-all-custom-nodes", "--whitelist-custom-nodes", PACK_DIR_NAME, TEST_PACK_DIR_NAME,
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(cmd, cwd=str(self.comfy_dir), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ComfyUI exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/system_stats", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"ComfyUI did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server and everything in its process group (workers included)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def get(self, path: str, **kw: Any) -> Any:
        r = requests.get(f"{self.url}{path}", timeout=kw.pop("timeout", 30), **kw)
        r.raise_for_status()
        return r.json()

    def queue(self, prompt: dict) -> str:
        """POST an API-format prompt; raise PromptFailed with ComfyUI's message if it is refused."""
        r = requests.post(f"{self.url}/prompt", json={"prompt": prompt, "client_id": uuid.uuid4().hex}, timeout=60)
        body = r.json()
        if r.status_code != 200 or body.get("node_errors"):
            raise PromptFailed(_validation_message(body), body)
        return body["prompt_id"]

    def wait(self, prompt_id: str, timeout: float = 300.0) -> dict:
        """Wait for a queued prompt; return its history entry or raise PromptFailed with the error."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ComfyUI died while running a prompt:\n{self.log_tail()}")
            hist = self.get(f"/history/{prompt_id}")
            entry = hist.get(prompt_id)
            if entry and entry.get("status", {}).get("completed") is not None and (
                entry["status"].get("status_str") in ("success", "error")
            ):
                if entry["status"]["status_str"] == "error":
                    raise PromptFailed(_execution_message(entry), entry)
                return entry
            time.sleep(0.25)
        raise TimeoutError(f"prompt {prompt_id} did not finish within {timeout:.0f} s:\n{self.log_tail()}")

    def run(self, prompt: dict, timeout: float = 300.0) -> dict:
        return self.wait(self.queue(prompt), timeout)

    def __enter__(self) -> "ComfyServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _validation_message(body: dict) -> str:
    parts = []
    err = body.get("error")
    if isinstance(err, dict):
        parts.append(f"{err.get('message', '')}: {err.get('details', '')}")
    for node_id, node_err in (body.get("node_errors") or {}).items():
        for e in node_err.get("errors", []):
            parts.append(f"node {node_id} ({node_err.get('class_type')}): {e.get('message')}: {e.get('details')}")
    return "\n".join(parts) or json.dumps(body)[:2000]


def _execution_message(entry: dict) -> str:
    for kind, data in entry.get("status", {}).get("messages", []):
        if kind == "execution_error":
            return f"node {data.get('node_id')} ({data.get('node_type')}): {data.get('exception_message')}"
    return json.dumps(entry.get("status"))[:2000]


def output_images(entry: dict) -> list[dict]:
    """The image records (filename, subfolder, type) of a finished prompt, over all its output nodes."""
    images = []
    for out in entry.get("outputs", {}).values():
        images.extend(out.get("images", []))
    return images
