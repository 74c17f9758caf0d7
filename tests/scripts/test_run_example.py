"""The README's first command, `bash scripts/run_example.sh OUT_DIR`: the pack's main job (the quality benchmark's
trained LTXV refining a video twice its trained size, untiled and with TDP 2 x 2, through a headless ComfyUI) runs to
the end as a user runs it. TDP is at least 2 dB closer to the ground truth than the untiled refine, and both numbers
are the quality benchmark's own for that video (its in-process refine). The command leaves the picture, the frames,
the latents and the prompt it sent in OUT_DIR, prints both PSNRs and the picture's path last, and no server behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from PIL import Image
from safetensors.torch import load_file

from ltx_tdp.bench.quality import data
from ltx_tdp.bench.quality.metrics import psnr
from ltx_tdp.bench.quality.model import SHIPPED_CHECKPOINT
from ltx_tdp.bench.quality.shipped import example_psnrs
from ltx_tdp_devkit.paths import PACK_ROOT
from ltx_tdp_devkit.quality_example import example_config

pytestmark = pytest.mark.server

MIN_GAIN_DB = 2.0
"""TDP's least PSNR gain over the untiled refine (the benchmark measures +3.4 dB on average over its videos)."""


@pytest.fixture(scope="module")
def main_job(comfy_dir: Path, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("main_job") / "tdp_output"
    # COMFYUI_DIR: the tree under test, set up already (no second copy). TMPDIR: the server's base directory is
    # made under it, so this test knows its own server from another run's on the same machine.
    env = {**os.environ, "COMFYUI_DIR": str(comfy_dir), "TMPDIR": str(out.parent)}
    proc = subprocess.run(["bash", "scripts/run_example.sh", str(out)], cwd=PACK_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"run_example.sh failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, out


def test_tdp_beats_the_untiled_refine_by_2_db_and_the_last_lines_say_so(main_job):
    proc, out = main_job
    result = json.loads((out / "result.json").read_text())
    untiled, tdp = result["psnr_db"]["untiled"], result["psnr_db"]["tdp"]
    assert tdp - untiled >= MIN_GAIN_DB, f"TDP {tdp:.2f} dB vs untiled {untiled:.2f} dB: gain below {MIN_GAIN_DB} dB"
    last = proc.stdout.strip().splitlines()[-2:]
    assert f"untiled {untiled:.2f} dB" in last[0] and f"{tdp:.2f} dB" in last[0], f"last lines: {last}"
    picture = Path(re.sub(r"^.*picture: ", "", last[1]))
    assert picture == out / "ltx_tdp_example.png" and picture.is_file(), f"last line: {last[1]}"
    width, height = Image.open(picture).size
    assert width >= 800 and height >= 600, f"the picture is {width} x {height} px"


def test_it_sent_the_ground_truth_and_the_psnrs_are_those_of_the_latents_it_saved(main_job):
    _, out = main_job
    cfg = example_config()
    result = json.loads((out / "result.json").read_text())
    gt = data.video(cfg.train.data, cfg.cells, cfg.cells, result["video_seed"])[None]
    sent = load_file(str(out / "latents" / "ground_truth.latent"))["latent_tensor"]
    assert sent.equal(gt), f"the latent it sent ({tuple(sent.shape)}) is not video {result['video_seed']} of data.py"
    for name in ("untiled", "tdp"):
        latent = load_file(str(out / "latents" / f"{name}.latent"))["latent_tensor"]
        assert latent.shape == gt.shape, f"{name}: {tuple(latent.shape)}, the ground truth is {tuple(gt.shape)}"
        assert abs(psnr(latent, gt) - result["psnr_db"][name]) < 1e-6, (name, psnr(latent, gt), result["psnr_db"])
    frames = sorted(p.name for p in (out / "frames").glob("*.png"))
    assert len(frames) == 3 * gt.shape[2], f"frames: {frames}"
    assert Image.open(out / "frames" / frames[0]).size == (512, 512), Image.open(out / "frames" / frames[0]).size


def test_the_numbers_are_the_quality_benchmarks_own_for_that_video(main_job, comfy):
    """The server path (LoadLatent, RandomNoise, KarrasScheduler, test conditioning) reproduces the benchmark's
    in-process refine of the same case (bench/quality/shipped.py: FixedNoise, the sigmas as a tensor, its context)."""
    _, out = main_job
    result = json.loads((out / "result.json").read_text())
    bench = example_psnrs(example_config(), SHIPPED_CHECKPOINT)
    for name in ("untiled", "tdp"):
        assert abs(bench[name] - result["psnr_db"][name]) < 0.01, (
            f"{name}: the main job gives {result['psnr_db'][name]:.3f} dB, the benchmark {bench[name]:.3f} dB")


def test_the_prompt_it_sent_refines_with_the_packs_nodes_and_no_server_is_left(main_job):
    _, out = main_job
    prompt = json.loads((out / "workflow_api.json").read_text())
    types = sorted(n["class_type"] for n in prompt.values())
    for node in ("LoadLatent", "LTXTDPTileConfig", "LTXTDPModelPatcher", "SamplerCustomAdvanced", "SaveLatent"):
        assert node in types, f"the prompt it sent has no {node}: {types}"
    tiling = next(n["inputs"] for n in prompt.values() if n["class_type"] == "LTXTDPTileConfig")
    assert (tiling["height_tiles"], tiling["width_tiles"]) == (2, 2), tiling
    base = f"{out.parent}/ltx-tdp-example."  # this run's server, whatever else runs on the machine
    servers = [line for line in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
               if base in line and "main.py" in line]
    assert not servers, f"a ComfyUI server of the example is still running: {servers}"
