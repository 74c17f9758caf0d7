"""ComfyUI in this process, on the CPU, the way `main.py --cpu --use-pytorch-cross-attention` sets it up."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_started: Path | None = None


def start(comfy_dir: Path, base_dir: Path) -> None:
    """Make `comfy.*`, `nodes` and `folder_paths` importable and configured for CPU (once per process)."""
    global _started
    if _started is not None:
        return
    sys.path.insert(0, str(comfy_dir))
    import comfy.cli_args as cli

    cli.args.cpu = True
    cli.args.use_pytorch_cross_attention = True
    cli.args.base_directory = str(base_dir)
    cli.args.disable_all_custom_nodes = True
    import utils.extra_config  # noqa: F401  (as main.py does early: ComfyUI's `utils` package, not comfy/utils.py)
    import folder_paths  # noqa: F401  (reads base_directory)
    import comfy.model_management  # noqa: F401
    import nodes

    # The built-in extra nodes (comfy_extras: LTXV nodes, SamplerCustomAdvanced, ...), no custom nodes.
    asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))
    _started = comfy_dir


def comfyui_version() -> str:
    import comfyui_version

    return comfyui_version.__version__


def node_class(name: str) -> type:
    import nodes

    if name not in nodes.NODE_CLASS_MAPPINGS:
        raise KeyError(f"ComfyUI {comfyui_version()} has no node {name}")
    return nodes.NODE_CLASS_MAPPINGS[name]


def run_node(node: str | type, **inputs: Any) -> tuple:
    """Run one node (V1 or V3) the way the executor would, and return its outputs as a tuple."""
    cls = node_class(node) if isinstance(node, str) else node
    if hasattr(cls, "define_schema"):  # V3
        out = cls.execute(**inputs)
        if asyncio.iscoroutine(out):
            out = asyncio.run(out)
        return tuple(out.result) if out.result is not None else ()
    obj = cls()
    out = getattr(obj, cls.FUNCTION)(**inputs)
    if isinstance(out, dict):
        out = out.get("result", ())
    return tuple(out)


def quiet() -> None:
    logging.getLogger().setLevel(logging.WARNING)


def start_script(base_dir: Path) -> Path:
    """The benchmarks' and scripts' one preamble: ComfyUI under test (`paths.comfyui_dir`, as scripts/env.sh
    sets it up) in this process on the CPU with `base_dir` as its base directory, and this checkout imported as
    the package `ltx_tdp`. Returns ComfyUI's directory; exits with a message when none is configured."""
    from .pack import import_pack
    from .paths import comfyui_dir

    comfy_dir = comfyui_dir()
    if comfy_dir is None:
        raise SystemExit("no ComfyUI tree: run through `source scripts/env.sh` (or set COMFYUI_DIR)")
    start(comfy_dir, base_dir)
    import_pack()
    return comfy_dir


__all__ = ["start", "start_script", "comfyui_version", "node_class", "run_node", "quiet", "ModuleType"]
