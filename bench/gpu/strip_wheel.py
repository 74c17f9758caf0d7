"""Repack a wheel without its compiled extension modules, as a pure-Python `py3-none-any` wheel.

    python3 bench/gpu/strip_wheel.py IN.whl OUT_DIR

bench/gpu/prepare.sh uses it for comfy-kitchen: its CUDA and HIP kernels (`backends/*/_C*.so`, about 230 MB)
are built for one CPython and one torch, and would not fit the device tool's 64 MiB. Without them
comfy-kitchen registers only its eager (and triton) backends, which ComfyUI uses instead, so quantized
layers compute the same values, slower. Prints the new wheel's path.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

COMPILED = re.compile(r"\.(so|pyd|dylib)$")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def strip(wheel: Path, out_dir: Path) -> Path:
    """A copy of `wheel` in `out_dir` without compiled modules, tagged py3-none-any (RECORD rewritten)."""
    name, version = wheel.name.split("-")[:2]
    target = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as src:
        files = {i.filename: src.read(i) for i in src.infolist() if not i.is_dir() and not COMPILED.search(i.filename)}
    record = next(k for k in files if k.endswith(".dist-info/RECORD"))
    meta = next(k for k in files if k.endswith(".dist-info/WHEEL"))
    lines = [ln for ln in files[meta].decode().splitlines() if not ln.startswith(("Tag:", "Root-Is-Purelib:"))]
    files[meta] = ("\n".join(lines + ["Root-Is-Purelib: true", "Tag: py3-none-any"]) + "\n").encode()
    rows = [f"{k},{_record_hash(v)},{len(v)}" for k, v in files.items() if k != record] + [f"{record},,"]
    files[record] = ("\n".join(rows) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for k, v in files.items():
            dst.writestr(k, v)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    print(strip(Path(sys.argv[1]), Path(sys.argv[2])))
