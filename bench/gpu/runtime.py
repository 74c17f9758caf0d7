"""ComfyUI in this process for one device (CUDA or the CPU), without its node registry or server.

Only ComfyUI's model code is imported (comfy.model_management, comfy.sd, the LTX models): that runs on a
bare GPU machine whose Python has torch but none of ComfyUI's server or video-file packages. Settings are
ComfyUI's own command-line settings: `--highvram` on a GPU (models stay on it; no copy to the CPU),
`--cpu` on the CPU, `--use-pytorch-cross-attention` (torch's SDPA) on both.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

_device: str | None = None


def start(comfy_dir: Path, device: str, base_dir: Path) -> None:
    """Make ComfyUI's `comfy` package and this pack (`ltx_tdp`) importable, configured for `device`."""
    global _device
    if _device is not None:
        return
    sys.path.insert(0, str(comfy_dir))  # ComfyUI's own code (it is not an installed package)
    import comfy.cli_args as cli

    args = cli.args
    args.cpu = device == "cpu"
    args.highvram = device != "cpu"
    args.use_pytorch_cross_attention = True
    args.base_directory = str(base_dir)
    args.disable_all_custom_nodes = True
    import torch

    if device != "cpu":
        torch.cuda.set_device(torch.device(device))
    import comfy.model_management  # noqa: F401  (reads the settings above)
    from ltx_tdp_devkit.pack import import_pack

    import_pack()
    logging.getLogger().setLevel(logging.WARNING)
    _device = device


def device() -> "torch.device":  # noqa: F821
    import torch

    return torch.device(_device or "cpu")


def comfyui_version(comfy_dir: Path) -> str:
    """ComfyUI's version from its comfyui_version.py, read without importing ComfyUI."""
    path = comfy_dir / "comfyui_version.py"
    if not path.is_file():
        return "unknown"
    for line in path.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "unknown"


def has_ltx2() -> bool:
    from ltx_tdp_devkit.tiny_models import has_ltxav

    return has_ltxav()


def attention_name() -> str:
    """The attention function ComfyUI picked (e.g. attention_pytorch: torch's SDPA)."""
    try:
        from comfy.ldm.modules.attention import optimized_attention

        return getattr(optimized_attention, "__name__", str(optimized_attention))
    except Exception as e:  # report, never fail the step for a name
        return f"unknown ({e})"


def kitchen_backends() -> str:
    """comfy-kitchen's backends that compute here (ComfyUI >= 0.24's quantized layers), e.g. "eager"; or why none."""
    try:
        from comfy.quant_ops import ck
    except ImportError as e:
        return f"none: comfy-kitchen is not importable ({e})"
    try:
        usable = [k for k, v in ck.list_backends().items() if v.get("available") and not v.get("disabled")]
    except Exception as e:  # report, never fail the step for a name
        return f"unknown ({e})"
    return ", ".join(usable) or "none"


def sync() -> None:
    import torch

    if device().type == "cuda":
        torch.cuda.synchronize()


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float | None]:
    """(result, seconds, peak GPU memory allocated during the call in GiB; None on the CPU)."""
    import torch

    cuda = device().type == "cuda"
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start_t = time.perf_counter()
    out = fn()
    sync()
    seconds = time.perf_counter() - start_t
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return out, seconds, peak


class Records:
    """A child step's results, one JSON line per measurement, flushed at once (a killed step keeps them)."""

    def __init__(self, path: Path, step: str):
        self.path = path
        self.step = step

    def add(self, name: str, status: str, **values: Any) -> None:
        """status: ok (measured / check passed), fail (check failed), oom, skip (with a reason), error."""
        line = json.dumps({"step": self.step, "name": name, "status": status, **values}, default=str)
        with open(self.path, "a") as f:
            f.write(line + "\n")
