"""The tiling core is pure torch: importing it loads nothing of ComfyUI's."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

PACK_ROOT = Path(__file__).resolve().parents[2]
TILING_SOURCES = sorted((PACK_ROOT / "tiling").glob("*.py"))
COMFY_MODULE = re.compile(r"^(comfy\w*|nodes|folder_paths)(\.|$)")

IMPORT_TILING = f"""
import importlib, importlib.util, json, sys
spec = importlib.util.spec_from_file_location(
    "ltx_tdp", {str(PACK_ROOT / "__init__.py")!r}, submodule_search_locations=[{str(PACK_ROOT)!r}]
)
pack = importlib.util.module_from_spec(spec)
sys.modules["ltx_tdp"] = pack
spec.loader.exec_module(pack)
importlib.import_module("ltx_tdp.tiling")
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_tiling_core_loads_no_comfyui_module():
    done = subprocess.run([sys.executable, "-c", IMPORT_TILING], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"importing ltx_tdp.tiling failed:\n{done.stderr}"
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ltx_tdp.tiling" in loaded, "the subprocess did not import ltx_tdp.tiling"
    comfy = [name for name in loaded if COMFY_MODULE.match(name)]
    assert comfy == [], f"importing ltx_tdp.tiling loaded {comfy}"


def test_the_tiling_sources_never_mention_a_comfy_module():
    assert TILING_SOURCES, f"no sources found under {PACK_ROOT / 'tiling'}"
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in TILING_SOURCES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"comfy|folder_paths", line)  # lower case: 'ComfyUI' in prose is fine
    ]
    assert offenders == [], f"tiling sources mention comfy: {offenders}"


def test_the_tiling_sources_import_only_the_standard_library_torch_and_each_other():
    allowed = set(sys.stdlib_module_names) | {"torch"}
    foreign = []
    for path in TILING_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            foreign += [f"{path.name}: {name}" for name in names if name.split(".")[0] not in allowed]
    assert foreign == [], f"tiling imports outside stdlib/torch: {foreign}"
