"""The GPU check's smoke run: every step of `bench/gpu/check.py` at tiny sizes on the CPU, in the suite, so
the script meant for a GPU machine cannot break unseen.

It runs the script as a GPU machine would (its own process per step, the real ComfyUI under test, the
tiny models of the suite, a real 2-rank gloo group) and checks what each step recorded: the correctness
checks pass with their measured differences, and the real-size steps (LTX-2 19B and the LTX-2 VAE at
4K on a GPU; the same code on tiny sizes here) measure every layout, and the LTX-2.5 steps (its published
configuration on a GPU; the tiny LTX-2 transformer with LTX-2.5's switches here, quantized fp8 and
int8-convrot with rotation groups of 16) pass their checks. Times are not checked: they are the GPU run's
business. On a ComfyUI without LTX-2 (0.3.75) the LTX-2 transformer steps are skipped with a reason naming
LTX-2, on one without LTX-2.5 (0.24.0, 0.3.75) the LTX-2.5 steps with LTX25_SKIP_REASON, and everything
else still runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ltx_tdp_devkit.paths import PACK_ROOT, comfyui_has_ltx25
from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON

CHECK = PACK_ROOT / "bench" / "gpu" / "check.py"
RESULTS = PACK_ROOT / "bench" / "results" / "gpu.md"
STEPS = ("one_by_one", "bf16_vs_fp32", "decode_one_tile", "group_two_ranks", "sequence_parallel", "dynamic_vram_lora",
         "memory_estimate", "decode_noise_field", "decode_tile_memory", "decode_node_one_device", "exchange_cost",
         "ltx25_fp8", "ltx25_int8", "transformer_tiles", "vae_tiled",
         "transformer_untiled", "vae_untiled")
PEAK_RECORD = "peak GPU memory of the step"
LTX2_STEPS = ("transformer_tiles", "transformer_untiled")
LTX25_STEPS = {"ltx25_fp8": ("fp8", "float8_e4m3fn"), "ltx25_int8": ("int8", "int8_tensorwise")}
"""step -> (its format label, the layer format ComfyUI loads: int8-convrot is int8_tensorwise with a rotation)."""
DEV_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACK_ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
"""The check's environment: the test kit on PYTHONPATH, as bench/gpu/run.sh and scripts/env.sh set it."""


def _has_ltx2(comfy_dir: Path) -> bool:
    return (comfy_dir / "comfy" / "ldm" / "lightricks" / "av_model.py").is_file()


@pytest.fixture(scope="module")
def smoke(comfy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One smoke run of the whole check; its report, records and every step's output."""
    out = tmp_path_factory.mktemp("gpu_smoke")
    before = RESULTS.read_bytes() if RESULTS.exists() else None
    proc = subprocess.run([sys.executable, str(CHECK), "--smoke", "--comfyui-dir", str(comfy_dir),
                           "--out", str(out / "gpu.md"), "--json", str(out / "gpu.json"), "--log", str(out / "steps.log")],
                          capture_output=True, text=True, timeout=840, cwd=PACK_ROOT, env=DEV_ENV)
    data = json.loads((out / "gpu.json").read_text()) if (out / "gpu.json").exists() else {"records": [], "steps": []}
    log = (out / "steps.log").read_text(errors="replace") if (out / "steps.log").exists() else ""
    return {"proc": proc, "records": data["records"], "steps": data["steps"], "report": out / "gpu.md",
            "log": log, "results_before": before}


def _records(smoke: dict, step: str) -> list[dict]:
    return [r for r in smoke["records"] if r["step"] == step]


def _why(smoke: dict) -> str:
    bad = [r for r in smoke["records"] if r["status"] not in ("ok", "skip")]
    return f"problems: {json.dumps(bad, default=str)[:3000]}\nstdout: {smoke['proc'].stdout[-1500:]}\n" \
           f"stderr: {smoke['proc'].stderr[-1500:]}\nsteps' output: {smoke['log'][-3000:]}"


def test_the_smoke_run_finishes_every_step_and_writes_its_report(smoke, comfy_dir):
    assert smoke["proc"].returncode == 0, f"check.py --smoke exited {smoke['proc'].returncode}\n{_why(smoke)}"
    outcomes = {s["step"]: s["outcome"] for s in smoke["steps"]}
    assert set(outcomes) == set(STEPS), f"steps run: {sorted(outcomes)}"
    for step, outcome in outcomes.items():
        if step in LTX25_STEPS and not comfyui_has_ltx25(comfy_dir):
            assert outcome.startswith(f"skipped: {LTX25_SKIP_REASON}"), f"{step}: {outcome}"
        elif step in LTX2_STEPS and not _has_ltx2(comfy_dir):
            assert outcome.startswith("skipped") and "LTX-2" in outcome, f"{step}: {outcome}"
        else:
            assert outcome == "ok", f"{step}: {outcome}\n{_why(smoke)}"
    report = smoke["report"].read_text()
    assert "smoke run" in report and "Correctness on the device" in report and "LTX-2 VAE decode" in report, report[:500]


def test_the_correctness_checks_pass_on_the_cpu_with_their_measured_differences(smoke):
    checks = {r["name"]: r for step in STEPS[:4] for r in _records(smoke, step) if r["name"] != PEAK_RECORD}
    expected = {"1x1 TDP == unpatched (float32)", "1x1 TDP == unpatched (bfloat16)",
                "2x2 TDP bf16 (device) vs fp32 (CPU)", "tiled decode, 1 tile == vae.decode",
                "2-rank group == single process (model call)", "2-rank group == single process (tiled decode)"}
    assert set(checks) == expected, f"checks recorded: {sorted(checks)}\n{_why(smoke)}"
    for name, r in checks.items():
        assert r["status"] == "ok", f"{name}: {r['status']}, measured {r.get('value')} (limit {r.get('limit')}): " \
                                    f"{r.get('detail') or r.get('error')}"
        assert r["value"] <= r["limit"], f"{name}: measured {r['value']:.3e} over its limit {r['limit']:.3e}"
    bf16 = checks["2x2 TDP bf16 (device) vs fp32 (CPU)"]
    assert 0 < bf16["value"], f"bf16 and fp32 agreed exactly ({bf16['value']}): the bf16 model did not run in bf16 weights"


def test_ltx2_steps_measure_every_layout_where_comfyui_has_ltx2_and_skip_naming_it_elsewhere(smoke, comfy_dir):
    if not _has_ltx2(comfy_dir):
        for step in LTX2_STEPS:
            (r,) = _records(smoke, step)
            assert r["status"] == "skip" and "LTX-2" in r["reason"], f"{step}: {r}"
        return
    by_name = {r["name"]: r for r in _records(smoke, "transformer_tiles")}
    build = by_name["build LTX-2 transformer"]
    assert build["detected_config"]["image_model"] == "ltxav", f"ComfyUI detected {build['detected_config']}"
    tiles = {"4 GPUs: one tile of 2x2": 1, "2 GPUs: two tiles of 2x2": 2, "1 GPU: all four tiles of 2x2": 4,
             "8 GPUs: one tile of 2x4": 1}
    for name, n in tiles.items():
        r = by_name.get(name)
        assert r is not None and r["status"] == "ok", f"{name}: {r}\n{_why(smoke)}"
        assert r["tiles_run"] == n, f"{name}: ran {r['tiles_run']} tiles, its share is {n}"
        assert r["seconds"] > 0 and r["finite"], f"{name}: {r['seconds']} s, finite output: {r['finite']}"
    (untiled,) = [r for r in _records(smoke, "transformer_untiled") if r["name"] == "untiled call"]
    assert untiled["status"] == "ok" and untiled["finite"], f"untiled call: {untiled}"


def test_ltx25_steps_pass_their_checks_in_both_formats_where_comfyui_has_ltx25(smoke, comfy_dir):
    if not comfyui_has_ltx25(comfy_dir):
        for step in LTX25_STEPS:
            (r,) = _records(smoke, step)
            assert r["status"] == "skip" and r["reason"].startswith(LTX25_SKIP_REASON), f"{step}: {r}"
        return
    for step, (fmt, loaded) in LTX25_STEPS.items():
        by_name = {r["name"]: r for r in _records(smoke, step)}
        build = by_name.get(f"build LTX-2.5 transformer ({fmt})")
        assert build is not None and build["status"] == "ok", f"{step}: {sorted(by_name)}\n{_why(smoke)}"
        assert build["keyframe_marker"] and build["detected_config"]["use_keyframes_abs_pos_embedding"], build
        assert build["quantized_layers"] > 0 and build["loaded_layer_formats"] == {loaded: build["quantized_layers"]}, (
            f"{step}: quantized {build['quantized_layers']} layers, ComfyUI loaded {build['loaded_layer_formats']}")
        exact = [f"1x1 TDP == unpatched ({fmt})"] + [f"2-rank group == local, {t} ({fmt})" for t in ("1x1", "1x2")]
        for name in [*exact, f"2-rank group == local, 2x2 ({fmt})"]:
            r = by_name.get(name)
            assert r is not None and r["status"] == "ok", f"{step} / {name}: {r}\n{_why(smoke)}"
            assert r["value"] <= r["limit"], f"{name}: measured {r['value']:.3e} over its limit {r['limit']:.3e}"
        for name in exact:
            assert by_name[name]["limit"] == 0.0 and "bit-identical: True" in by_name[name]["detail"], by_name[name]
        for layout in ("1x2", "2x2"):
            r = by_name[f"{layout} TDP on 1 GPU ({fmt})"]
            assert r["status"] == "ok" and r["finite"], f"{step} / {layout} on one device: {r}"


def test_the_vae_steps_decode_the_whole_clip_tiled_and_untiled(smoke):
    (tiled,) = [r for r in _records(smoke, "vae_tiled") if r["name"] == "tiled decode"]
    (untiled,) = [r for r in _records(smoke, "vae_untiled") if r["name"] == "VAE.decode, whole clip"]
    assert tiled["status"] == "ok" and tiled["finite"], f"tiled decode: {tiled}"
    assert untiled["status"] == "ok" and untiled["finite"], f"VAE.decode: {untiled}"
    assert tiled["tiles"] > 1, f"the smoke decode ran {tiled['tiles']} tile(s): nothing was tiled"
    # decode_tiled gives (batch, frames, H, W, C); ComfyUI's VAE.decode folds nothing for a video: the same.
    assert tiled["frames_shape"] == untiled["frames_shape"], f"{tiled['frames_shape']} vs {untiled['frames_shape']}"


def test_the_comfyui_default_checks_pass_and_the_decode_checks_pass_or_name_what_they_need(smoke, comfy_dir):
    """Issue 30's checks under ComfyUI's defaults: on the CPU Dynamic VRAM is off (ComfyUI's --cpu), so the LoRA
    check compares with the weights patched in place; on a GPU the same step compares with Dynamic VRAM's. The
    decode's checks (items 6 and 7) run on the CPU too: the noise field is drawn only at the load, one diffusion
    tile equals vae.decode, a 2-rank group one process, and each decode's tracked peak stays within its estimate;
    without LTX-2.5's VAE (ComfyUI < 0.32) its checks skip naming it."""
    checks = {r["name"]: r for step in ("dynamic_vram_lora", "memory_estimate") for r in _records(smoke, step)
              if r["name"] != PEAK_RECORD}
    expected = {"LoRA'd weights sent == ComfyUI's", "2-rank group with a LoRA == single process",
                "memory asked for a 2x2 TDP step at cfg 3"}
    assert set(checks) == expected, f"checks recorded: {sorted(checks)}\n{_why(smoke)}"
    for name, r in checks.items():
        assert r["status"] == "ok" and r["value"] <= r["limit"], \
            f"{name}: {r['status']}, measured {r.get('value')} (limit {r.get('limit')}): {r.get('detail') or r.get('error')}"
    assert "Dynamic VRAM off" in checks["LoRA'd weights sent == ComfyUI's"]["detail"], checks
    decode = {r["name"]: r for step in ("decode_noise_field", "decode_tile_memory") for r in _records(smoke, step)
              if r["name"] != PEAK_RECORD}
    ltx25 = comfyui_has_ltx25(comfy_dir)
    wanted = {"conv (LTX-2's decoder kind) decode's peak within its estimate (item 7)"} | (
        {"noise field drawn after ComfyUI made room for it (item 6)", "diffusion decode, 1 tile == vae.decode (item 6)",
         "2-rank group == single process, diffusion decode (item 6)",
         "diffusion (LTX-2.5) decode's peak within its estimate (item 7)"} if ltx25 else set())
    assert wanted <= set(decode), f"decode checks recorded: {sorted(decode)}\n{_why(smoke)}"
    for name in wanted:
        r = decode[name]
        assert r["status"] == "ok", f"{name}: {r['status']}: {r.get('detail') or r.get('error')}"
        if r.get("limit") is not None:
            assert r["value"] <= r["limit"], f"{name}: measured {r['value']:.3e} over its limit {r['limit']:.3e}"
    for name in set(decode) - wanted:
        assert decode[name]["status"] == "skip" and "ComfyUI >= 0.32" in decode[name]["reason"], decode[name]


def test_the_decode_node_equals_one_device_and_the_exchange_is_timed_and_checked(smoke):
    """The decode node with its device choice at the default == today's one-device decode, bit for bit; the exchange
    copies K/V through host memory and device to device (one device here: labelled an upper bound), each copy
    equal to its source."""
    (decode,) = [r for r in _records(smoke, "decode_node_one_device") if r["name"] != PEAK_RECORD]
    assert decode["status"] == "ok" and decode["value"] == 0.0 and "bit-identical: True" in decode["detail"], decode
    copies = {r["name"]: r for r in _records(smoke, "exchange_cost") if r["name"] != PEAK_RECORD}
    assert len(copies) == 2 and any("host" in n for n in copies) and any("upper bound" in n for n in copies), copies
    for name, r in copies.items():
        assert r["status"] == "ok" and r["seconds"] > 0 and r["bytes"] == 2 * 2 * r["shape"][1] * r["shape"][2], r
    assert "In-process paths on one device" in smoke["report"].read_text()


def test_every_step_that_ran_reports_its_peak_memory_and_the_report_shows_it(smoke):
    ran = [s["step"] for s in smoke["steps"] if not s["outcome"].startswith("skipped")]
    missing = [step for step in ran if not any(r["name"] == PEAK_RECORD for r in _records(smoke, step))]
    assert not missing, f"steps without a peak-memory record: {missing}"
    report = smoke["report"].read_text()
    assert "torch peak GiB" in report and "model loading" in report and "--cpu" in report, report[:1500]


def test_a_cpu_run_never_writes_the_gpu_results(smoke, comfy_dir):
    proc = subprocess.run([sys.executable, str(CHECK), "--smoke", "--comfyui-dir", str(comfy_dir), "--only", "one_by_one"],
                          capture_output=True, text=True, timeout=120, cwd=PACK_ROOT, env=DEV_ENV)
    assert proc.returncode != 0 and "does not write" in proc.stderr, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    after = RESULTS.read_bytes() if RESULTS.exists() else None
    assert after == smoke["results_before"], "a CPU run changed bench/results/gpu.md"
