"""docs/development.md's code layout names every module of the pack, and no module that is gone: a new file in
tiling/, ltx/, multigpu/ or nodes/ (or beside __init__.py) fails here until the layout says what it holds."""

from __future__ import annotations

import re

from ltx_tdp_devkit.paths import PACK_ROOT

PACK_FOLDERS = ("tiling", "ltx", "multigpu", "nodes")
NAME_COLUMN = 21
"""The layout block's first column (a folder or a file) is this wide; the description follows."""


def pack_modules() -> set[str]:
    """Every .py file of the pack (the root's and its folders'), as a path relative to the pack root."""
    found = {p.name for p in PACK_ROOT.glob("*.py")}
    for folder in PACK_FOLDERS:
        found |= {p.relative_to(PACK_ROOT).as_posix() for p in (PACK_ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts}
    return found


def layout_modules(text: str) -> set[str]:
    """The modules the '## Code layout' block names: an entry in the first column (a root file, a folder, or
    an indented subfolder or file of the folder above it) and every `name.py` in its description."""
    block = text.split("## Code layout", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    top = folder = ""
    for line in block.splitlines():
        entry = line[:NAME_COLUMN].rstrip()
        if entry and not entry.startswith(" "):
            top, folder = (entry, entry) if entry.endswith("/") else ("", "")
            if entry.endswith(".py"):
                named.add(entry)
        elif entry.strip():
            name = entry.strip()
            folder = top + name if name.endswith("/") else top
            if name.endswith(".py"):
                named.add(top + name)
        named |= {folder + name for name in re.findall(r"\b\w+\.py\b", line[NAME_COLUMN:])}
    return named


def test_the_code_layout_names_every_module_of_the_pack_and_no_other():
    text = (PACK_ROOT / "docs" / "development.md").read_text()
    modules, named = pack_modules(), layout_modules(text)
    missing = sorted(m for m in modules if m not in named)
    gone = sorted(m for m in named if ("/" not in m or m.split("/")[0] in PACK_FOLDERS) and m not in modules)
    assert len(modules) > 50, f"found only {len(modules)} modules: {sorted(modules)}"
    assert not missing, f"docs/development.md's code layout does not name {missing}"
    assert not gone, f"docs/development.md's code layout names modules that do not exist: {gone}"
