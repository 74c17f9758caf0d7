"""ComfyUI in this process for one device (CUDA or the CPU), without its node registry or server.

Only ComfyUI's model code is imported (comfy.model_management, comfy.sd, the LTX models): that runs on a
bare GPU machine whose Python has torch but none of ComfyUI's server or video-file packages. Settings are
ComfyUI's own command-line settings, as users start it: `main.py`'s defaults on a GPU (no `--highvram`;
Dynamic VRAM on where `comfy.cli_args.enables_dynamic_vram()` says so, i.e. on NVIDIA by default), `--cpu` on
the CPU, `--use-pytorch-cross-attention` (torch's SDPA) on both.

Dynamic VRAM is started here as ComfyUI's `main.py` starts it at launch (this process does not run `main.py`,
which would start the server): comfy-aimdo initialised before model management is imported, its devices
after, and on success ComfyUI's model patcher made the dynamic one and `comfy.memory_management.aimdo_enabled`
set, the two assignments main.py makes. Where comfy-aimdo cannot start, ComfyUI's estimate-based patcher runs,
as in ComfyUI, and the report says so.
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

PEAK_RECORD = "peak GPU memory of the step"
"""The record every step ends with (check.py): its peak memory and whether Dynamic VRAM ran."""

_device: str | None = None
_earlier_peak = 0
"""torch's allocator peak before `measure` last reset it (bytes): the step's peak is the larger of the two."""


def start(comfy_dir: Path, device: str, base_dir: Path) -> None:
    """Make ComfyUI's `comfy` package and this pack (`ltx_tdp`) importable, configured for `device`."""
    global _device
    if _device is not None:
        return
    sys.path.insert(0, str(comfy_dir))  # ComfyUI's own code (it is not an installed package)
    import comfy.cli_args as cli

    args = cli.args
    args.cpu = device == "cpu"
    args.use_pytorch_cross_attention = True
    args.base_directory = str(base_dir)
    args.disable_all_custom_nodes = True
    dynamic = getattr(cli, "enables_dynamic_vram", lambda: False)() and _start_aimdo(args)  # before CUDA starts, as main.py
    import torch

    if device != "cpu":
        torch.cuda.set_device(torch.device(device))
    import comfy.model_management  # noqa: F401  (reads the settings above)

    if dynamic:
        _start_dynamic_vram(torch.device(device), args)
    from ltx_tdp_devkit.pack import import_pack

    import_pack()
    logging.getLogger().setLevel(logging.WARNING)
    _device = device


def _start_aimdo(args: object) -> bool:
    """comfy-aimdo's library, before model management is imported (main.py's first step); False if it cannot start."""
    try:
        import comfy_aimdo.control as control
    except ImportError:
        return False
    try:
        return bool(control.init(nvml_pressure=not getattr(args, "disable_nvml_pressure", False)))
    except TypeError:  # an older comfy-aimdo
        return bool(control.init())


def _start_dynamic_vram(dev: "torch.device", args: object) -> None:  # noqa: F821
    """Dynamic VRAM on `dev`, as main.py turns it on once model management is imported."""
    import comfy.memory_management
    import comfy.model_patcher
    import comfy_aimdo.control as control

    headroom = int(getattr(args, "vram_headroom", 0) * 2**30)
    try:
        started = control.init_devices([(dev.index or 0, headroom)])
    except TypeError:  # an older comfy-aimdo
        started = control.init_devices([dev.index or 0])
    if started:
        comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
        comfy.memory_management.aimdo_enabled = True


def dynamic_vram() -> bool:
    """Whether ComfyUI in this process runs Dynamic VRAM (older ComfyUI has no `comfy.memory_management`)."""
    memory_management = sys.modules.get("comfy.memory_management")
    return bool(getattr(memory_management, "aimdo_enabled", False))


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


def memory_now() -> dict[str, float | None]:
    """GiB: torch's allocator peak since the last reset, and the device memory in use now (Dynamic VRAM's
    own allocations included, which torch's allocator does not see); None on the CPU."""
    import torch

    if device().type != "cuda":
        return {"torch_peak_gib": None, "device_used_gib": None}
    free, total = torch.cuda.mem_get_info(device())
    peak = max(_earlier_peak, torch.cuda.max_memory_allocated())
    return {"torch_peak_gib": peak / 2**30, "device_used_gib": (total - free) / 2**30}


def started() -> bool:
    """Whether `start` has configured ComfyUI in this process."""
    return _device is not None


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float | None]:
    """(result, seconds, peak GPU memory allocated during the call in GiB; None on the CPU)."""
    global _earlier_peak
    import torch

    cuda = device().type == "cuda"
    sync()
    if cuda:
        _earlier_peak = max(_earlier_peak, torch.cuda.max_memory_allocated())
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
