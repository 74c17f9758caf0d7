"""The GPU check as shipped: `bench/gpu/run.sh` run on the CPU in the GPU machine's Python environment, with the
wheels `bench/gpu/prepare.sh` carries and nothing else, so that a package the machine lacks fails here first.

The environment (bench/gpu/image_env.sh): a Python 3.12 virtual environment holding exactly the pinned lines of
bench/gpu/image_packages.txt (the image's packages that torch, ComfyUI's model code and the check can import;
torch is the registry's 2.11.0+cu130, the image's own build, whose CUDA libraries are installed but unused on a
CPU), cached in ~/.cache/ltx-tdp keyed by the list, built once per machine (about 2.5 minutes and 5 GB). Then
prepare.sh gathers the ComfyUI tree under test and the carried wheels into a temporary folder, and run.sh runs
`check.py --smoke` with that environment's python as `python3`, as the GPU machine runs it with its own.
Deviations from the image, each stated where it is set: Python 3.12 of this machine (the image's is 3.12.3),
packages of the image outside the list are not installed (stricter, never laxer), versions marked `resolved` in
the list were not read from the image. Cost on a quiet 2-core machine: the build once, then about 4 minutes
(the smoke check's 17 steps, each its own process).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from ltx_tdp_devkit.paths import PACK_ROOT, comfyui_has_ltx25

GPU = PACK_ROOT / "bench" / "gpu"
IMAGE_PACKAGES = GPU / "image_packages.txt"
CARRIED = GPU / "carried.txt"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def _pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line (comments after it ignored)."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==([^\s#]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _image_names() -> set[str]:
    """Every package the image holds: the pinned lines and the list of those the rehearsal leaves out."""
    text = IMAGE_PACKAGES.read_text()
    rest = text.split("# Also on the image, not installed by the rehearsal", 1)[1].split("# NOT on the image", 1)[0]
    names = {n.strip().lower() for n in rest.split(":", 1)[1].replace("#", " ").split(",") if n.strip()}
    return names | set(_pins(IMAGE_PACKAGES))


def _carried() -> list[str]:
    return [line.split("==")[0].strip().lower() for line in CARRIED.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_the_carried_packages_are_all_missing_from_the_image_and_none_is_torch():
    image, carried = _image_names(), _carried()
    assert len(image) > 150 and {"torch", "numpy", "safetensors", "transformers"} <= image, sorted(image)[:20]
    assert {"torchsde", "av", "comfy-aimdo", "comfy-kitchen"} <= set(carried), carried
    assert not set(carried) & image, f"carried though the image has them: {sorted(set(carried) & image)}"
    assert not {"torch", "torchvision", "torchaudio", "triton"} & set(carried), carried


@pytest.fixture(scope="module")
def image_python() -> Path:
    proc = subprocess.run(["bash", str(GPU / "image_env.sh")], capture_output=True, text=True, timeout=3000)
    if proc.returncode == 3:
        pytest.skip(f"no Python 3.12 here (the GPU machine's): {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, f"image_env.sh exited {proc.returncode}: {proc.stderr[-3000:]}"
    return Path(proc.stdout.strip().splitlines()[-1])


def test_the_image_environment_holds_the_list_and_nothing_else(image_python):
    proc = subprocess.run([str(image_python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    got = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(proc.stdout)}
    got.pop("pip", None)  # the venv's own pip; the image has one too
    assert got == _pins(IMAGE_PACKAGES), (f"not listed: {sorted(set(got) - set(_pins(IMAGE_PACKAGES)))}; "
                                          f"differing: {sorted(k for k in got if _pins(IMAGE_PACKAGES).get(k) != got[k])}")


@pytest.fixture(scope="module")
def rehearsal(image_python: Path, comfy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """prepare.sh into a temporary carry folder, then run.sh --smoke with the image's python as python3."""
    tmp = tmp_path_factory.mktemp("gpu_image")
    carry, out = tmp / "carry", tmp / "out"
    out.mkdir()
    prep = subprocess.run(["bash", str(GPU / "prepare.sh"), str(comfy_dir)], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "TDP_CARRY_DIR": str(carry), "TDP_PYTHON": str(image_python)})
    assert prep.returncode == 0, f"prepare.sh exited {prep.returncode}: {prep.stderr[-3000:]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{image_python.parent}{os.pathsep}/usr/bin{os.pathsep}/bin", OUT=str(out),
               TDP_CARRY_DIR=str(carry), TDP_GPU_SITE=str(tmp / "site"))
    proc = subprocess.run(["bash", str(GPU / "run.sh"), "--smoke", "--out", str(out / "smoke.md")], cwd=PACK_ROOT,
                          capture_output=True, text=True, timeout=3000, env=env)
    data = json.loads((out / "gpu.json").read_text()) if (out / "gpu.json").exists() else {"records": [], "steps": [], "env": {}}
    return {"proc": proc, "wheels": sorted(p.name for p in (carry / "wheels").glob("*.whl")), **data}


def _expected_skip(step: str, comfy_dir: Path) -> bool:
    if step.startswith("ltx25"):
        return not comfyui_has_ltx25(comfy_dir)
    if step.startswith("transformer_"):
        return not (comfy_dir / "comfy" / "ldm" / "lightricks" / "av_model.py").is_file()
    return False


def test_every_step_of_the_check_runs_in_the_image_environment_with_the_carried_wheels(rehearsal, comfy_dir):
    missing = [f"{r['step']}: {r.get('error')}" for r in rehearsal["records"]
               if re.search(r"ModuleNotFoundError|No module named", str(r.get("error") or ""))]
    assert not missing, ("a step needs a package the GPU machine lacks: carry it (bench/gpu/carried.txt)\n"
                         + "\n".join(missing))
    assert rehearsal["steps"], f"run.sh ran no step: {rehearsal['proc'].stderr[-3000:]}"
    env = rehearsal["env"]
    assert env["torch"].startswith("2.11.0") and env["python"].startswith("3.12"), env
    for s in rehearsal["steps"]:
        if _expected_skip(s["step"], comfy_dir):
            assert s["outcome"].startswith("skipped"), s
        else:
            bad = [r for r in rehearsal["records"] if r["step"] == s["step"] and r["status"] not in ("ok", "skip")]
            assert s["outcome"] == "ok" and not bad, f"{s}: {json.dumps(bad, default=str)[:2000]}"
    assert rehearsal["proc"].returncode == 0, rehearsal["proc"].stderr[-3000:]
    assert any(w.startswith("torchsde-") for w in rehearsal["wheels"]), rehearsal["wheels"]
