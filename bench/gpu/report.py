"""bench/results/gpu.md from the records of the GPU check's steps: environment, correctness, the real-size
figures and what they imply per sampling step, and every step that failed, timed out or was skipped."""

from __future__ import annotations

from typing import Any

from in_process_report import section as in_process_section
from in_process_report import summary_lines as in_process_summary
from runtime import PEAK_RECORD

LTX25_STEPS = ("ltx25_fp8", "ltx25_int8")
COMFY_DEFAULT_STEPS = ("dynamic_vram_lora", "memory_estimate", "decode_noise_field", "decode_tile_memory")

STAGE2_STEPS = 2
"""Upstream LTX-2 stage 2 samples sigmas 0.625, 0.4, 0: two model calls at cfg 1 (the distilled model)."""


def _f(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _cell(text: object, limit: int = 400) -> str:
    """Text for one markdown table cell or list line: one line, pipes escaped, at most `limit` characters."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def _find(records: list[dict], step: str, name: str | None = None) -> list[dict]:
    """`step`'s records named `name` (all but its closing peak-memory record when None)."""
    return [r for r in records if r["step"] == step and (r["name"] == name if name else r["name"] != PEAK_RECORD)]


def _checks_table(records: list[dict], steps: tuple[str, ...]) -> list[str]:
    """A markdown table of the checks `steps` recorded: result, measured value, limit, detail."""
    lines = ["| check | result | measured | limit | detail |", "|---|---|---:|---:|---|"]
    for step in steps:
        for r in _find(records, step):
            value = "—" if r.get("value") is None else f"{r['value']:.3g}"
            limit = "—" if r.get("limit") is None else f"{r['limit']:.3g}"
            detail = r.get("detail") or r.get("error") or r.get("reason") or ""
            lines.append(f"| {r['name']} | {r['status']} | {value} | {limit} | {_cell(detail)} |")
    return lines


def _best(records: list[dict], step: str, name: str) -> dict | None:
    ok = [r for r in _find(records, step, name) if r["status"] == "ok"]
    return min(ok, key=lambda r: r["seconds"]) if ok else None


def _status(r: dict | None, step_records: list[dict]) -> str:
    if r is not None:
        return "measured"
    bad = [x for x in step_records if x["status"] != "ok"]
    return bad[-1]["status"] if bad else "not run"


def step_time_rows(records: list[dict]) -> list[dict]:
    """Per-step figures of the transformer: untiled, and the TDP layouts for 1, 2, 4 and 8 GPUs."""
    rows = []
    untiled = _best(records, "transformer_untiled", "untiled call")
    u_recs = _find(records, "transformer_untiled", "untiled call")
    rows.append({"gpus": 1, "how": "untiled (whole frame)", "tiles": "—", "rec": untiled,
                 "status": _status(untiled, u_recs), "bound": False})
    for name in ("1 GPU: all four tiles of 2x2", "2 GPUs: two tiles of 2x2", "4 GPUs: one tile of 2x2",
                 "8 GPUs: one tile of 2x4"):
        r = _best(records, "transformer_tiles", name)
        recs = _find(records, "transformer_tiles", name)
        gpus = int(name.split()[0])
        rows.append({"gpus": gpus, "how": f"TDP {name.rsplit(' of ', 1)[1]}", "tiles": str(r["tiles_run"]) if r else "—",
                     "rec": r, "status": _status(r, recs), "bound": gpus > 1})
    return rows


CORRECTNESS_STEPS = ("one_by_one", "bf16_vs_fp32", "decode_one_tile", "group_two_ranks", "sequence_parallel")
"""The steps of the correctness table (tiny models of the test suite)."""


def summary(records: list[dict]) -> list[str]:
    """The headline figures, one line each: what docs/benchmarks.md quotes."""
    checks = [r for step in CORRECTNESS_STEPS for r in _find(records, step)]
    passed = sum(r["status"] == "ok" for r in checks)
    out = [f"correctness: {passed} of {len(checks)} checks passed"]
    ours = [r for step in COMFY_DEFAULT_STEPS for r in _find(records, step) if r["status"] != "skip"]
    out.append(f"under ComfyUI's defaults (issue 30): {sum(r['status'] == 'ok' for r in ours)} of {len(ours)} checks passed")
    for step in LTX25_STEPS:
        recs = [r for r in _find(records, step) if not r["name"].startswith("build")]
        if not recs:
            continue
        if recs[0]["status"] == "skip":
            out.append(f"{step}: skipped")
            continue
        checked = [r for r in recs if r.get("limit") is not None]
        ok = sum(r["status"] == "ok" for r in checked)
        tiles = next((r for r in recs if r["name"].startswith("2x2 TDP on 1 GPU") and r["status"] == "ok"), None)
        out.append(f"{step}: {ok} of {len(checked)} checks passed" +
                   (f"; 2x2 TDP on 1 GPU {_f(tiles['seconds'])} s per call" if tiles else ""))
    out.extend(in_process_summary(records))
    rows = step_time_rows(records)
    for row in rows:
        r = row["rec"]
        if r is not None:
            kind = "lower bound, " if row["bound"] else ""
            out.append(f"{row['gpus']} GPU{'s' if row['gpus'] > 1 else ''}, {row['how']}: {_f(r['seconds'])} s per "
                       f"sampling step ({kind}peak {_f(r.get('peak_gib'), 1)} GiB)")
        elif row["status"] != "not run":
            out.append(f"{row['gpus']} GPU{'s' if row['gpus'] > 1 else ''}, {row['how']}: {row['status']}")
    for step, name, label in (("vae_tiled", "tiled decode", "tiled decode"),
                              ("vae_untiled", "VAE.decode, whole clip", "ComfyUI VAE.decode")):
        rs = _find(records, step, name)
        if rs:
            r = rs[-1]
            out.append(f"{label}: {r['status']}, {_f(r.get('seconds'))} s, peak {_f(r.get('peak_gib'), 1)} GiB")
    return out


def render(env: dict, records: list[dict], steps: list[dict]) -> str:
    lines: list[str] = []
    add = lines.append
    add("# GPU check: the pack on CUDA at LTX-2's real size" if env["mode"].startswith("GPU") else
        "# GPU check, smoke run (tiny sizes on the CPU; not a GPU result)")
    add("")
    add(f"Produced by `bench/gpu/check.py` ({env['mode']}). Weights are random (nothing is downloaded): the "
        "figures are speed and memory, not image quality.")
    add("")
    add("| | |")
    add("|---|---|")
    for key in ("device", "gpu", "gpu_memory", "torch", "cuda", "comfyui", "model_loading", "python", "attention",
                "wall_s"):
        if env.get(key) is not None:
            add(f"| {key.replace('_', ' ')} | {env[key]} |")
    add("")
    for line in summary(records):
        add(f"* {line}")
    add("")

    add("## Correctness on the device (tiny models of the test suite)")
    add("")
    lines.extend(_checks_table(records, CORRECTNESS_STEPS))
    add("")
    add("## ComfyUI as users start it (issue 30): a LoRA under Dynamic VRAM, the memory ComfyUI is asked for, "
        "the tiled decode's noise field and peak")
    add("")
    lines.extend(_checks_table(records, COMFY_DEFAULT_STEPS))
    add("")

    lines.extend(in_process_section(env, records))
    lines.extend(ltx25_section(env, records))

    build = next((r for r in records if r["name"] == "build LTX-2 transformer" and r["status"] == "ok"), None)
    add("## LTX-2 transformer, stage 2 at 3840 x 2176 x 121" if env["mode"].startswith("GPU") else
        "## LTX-2 transformer, stage 2 (smoke sizes)")
    add("")
    if build is not None:
        add(f"Built with ComfyUI's LTXAVModel as ComfyUI detects it ({build['detected_config']}): "
            f"{_count(build['parameters'])} parameters, {build['layers']} layers, video {build['video_width']} "
            f"/ audio {build['audio_width']} wide, {build['dtype']} weights {_f(build['weights_gib'])} GiB, "
            f"built on the device in {_f(build['seconds'], 1)} s; attention: {build['attention']}. Input: video "
            f"latent {' x '.join(map(str, build['video_latent']))} (frames x height x width, one token per cell), "
            f"{build['audio_latents']} audio latents, {build['text_tokens']} text tokens, sigma {build['sigma']}.")
        add("")
    add("Seconds per sampling step = one model call (stage 2 runs cfg 1; double it for cfg > 1). For 2, 4 and 8 "
        "GPUs the figure is the measured compute of one GPU's share of the tiles (rank 0 of the group, tiles "
        "round-robin) without the all_reduce: a lower bound for the group.")
    add("")
    add("| GPUs | layout | tiles on the GPU | largest tile (tokens) | s per step | stage 2 (2 steps), s | peak GPU GiB "
        "| speed-up vs untiled | status |")
    add("|---:|---|---:|---|---:|---:|---:|---:|---|")
    rows = step_time_rows(records)
    untiled_s = rows[0]["rec"]["seconds"] if rows[0]["rec"] else None
    for row in rows:
        r = row["rec"]
        sec = r["seconds"] if r else None
        speed = _f(untiled_s / sec) if (untiled_s and sec) else "—"
        bound = " (lower bound)" if row["bound"] else ""
        tile = f"{' x '.join(map(str, r['largest_tile']))} ({r['tile_tokens']:,})" if r and r.get("largest_tile") else (
            f"whole ({r['tokens']:,})" if r and r.get("tokens") else "—")
        add(f"| {row['gpus']} | {row['how']} | {row['tiles']} | {tile} | {_f(sec)}{bound if sec else ''} | "
            f"{_f(sec * STAGE2_STEPS if sec else None)} | {_f(r.get('peak_gib') if r else None)} | {speed} | "
            f"{row['status']} |")
    one, four = rows[3]["rec"], rows[1]["rec"]
    if one and four:
        add("")
        add(f"Consistency: 4 x one tile of 2x2 = {_f(4 * one['seconds'])} s against {_f(four['seconds'])} s measured "
            "for all four tiles in one patched call (tiles differ by a cell in size; the call adds the blend).")
    add("")

    add("## LTX-2 VAE decode" + (" of a 3840 x 2176 x 121 clip" if env["mode"].startswith("GPU") else " (smoke sizes)"))
    add("")
    vb = next((r for r in records if r["name"] == "build LTX-2 VAE" and r["status"] == "ok"), None)
    if vb is not None:
        add(f"VAE decoder: {_count(vb['decoder_parameters'])} parameters, {vb['dtype']}.")
        add("")
    add("| method | time (s) | peak GPU GiB | tiles | output | status |")
    add("|---|---:|---:|---|---|---|")
    for step, name, label in (("vae_tiled", "tiled decode", "LTX TDP tiled decode"),
                              ("vae_untiled", "VAE.decode, whole clip", "ComfyUI VAE.decode (VAEDecode), untiled")):
        rs = _find(records, step, name)
        r = rs[-1] if rs else None
        status = r["status"] if r else _status(None, _find(records, step))
        if r is not None and r.get("fell_back_to_comfy_tiled"):
            status = "OOM: ComfyUI fell back to its own tiled decode (time includes the fallback)"
        out = f"{_f(r['output_gib'])} GiB {r.get('output', '')}" if r and r.get("output_gib") else (
            str(r.get("frames_shape")) if r and r.get("frames_shape") else "—")
        if r is not None and r.get("settings"):
            label += " (" + ", ".join(f"{k} {v}" for k, v in r["settings"].items()) + ")"
        add(f"| {label} | {_f(r.get('seconds') if r else None)} | {_f(r.get('peak_gib') if r else None)} | "
            f"{r.get('tiles', '—') if r else '—'} | {out} | {status} |")
    add("")

    add("## Steps")
    add("")
    add("Peak GPU memory per step: torch's allocator peak over the step's process, and the device memory in use at its "
        "end (Dynamic VRAM's own allocations, which torch's allocator does not see, included).")
    add("")
    add("| step | limit (s) | ran (s) | torch peak GiB | device in use GiB | outcome |")
    add("|---|---:|---:|---:|---:|---|")
    for s in steps:
        peak = next(iter(_find(records, s["step"], PEAK_RECORD)), {})
        add(f"| {s['step']} | {_f(s.get('limit_s'), 0)} | {_f(s.get('ran_s'), 1)} | {_f(peak.get('torch_peak_gib'))} | "
            f"{_f(peak.get('device_used_gib'))} | {_cell(s['outcome'])} |")
    problems = [r for r in records if r["status"] not in ("ok",)]
    if problems:
        add("")
        add("Problems recorded:")
        add("")
        for r in problems:
            msg = r.get("error") or r.get("reason") or r.get("detail") or ""
            add(f"* `{r['step']}` / {r['name']}: **{r['status']}** {_cell(msg, 1500)}")
    add("")
    return "\n".join(lines)


def ltx25_section(env: dict, records: list[dict]) -> list[str]:
    """The LTX-2.5 steps: how each model was built and loaded, and every check and timing they recorded."""
    lines = ["## LTX-2.5 transformer, quantized, at its published configuration" if env["mode"].startswith("GPU")
             else "## LTX-2.5 transformer, quantized (smoke sizes)", ""]
    lines.append("Random weights, quantized into ComfyUI's stored format and loaded by "
                 "`comfy.sd.load_diffusion_model_state_dict` (UNETLoader's loader). 1x1 and 1x2 on the 2-rank group "
                 "must equal the local call bit for bit (each cell sums one value per rank); 2x2 sums a cell's four "
                 "tiles per rank first (another order of fp32 additions: limit 1e-6 relative).")
    lines.append("")
    for step in LTX25_STEPS:
        recs = _find(records, step)
        build = next((r for r in recs if r["name"].startswith("build") and r["status"] == "ok"), None)
        if build is not None:
            cfg = build["detected_config"]
            switches = ", ".join(f"{k} {cfg[k]}" for k in ("causal_temporal_positioning", "apply_gated_attention",
                                                            "cross_attention_adaln", "caption_proj_before_connector",
                                                            "ff_bias", "audio_ff_bias", "use_keyframes_abs_pos_embedding")
                                 if k in cfg)
            group = f", rotation groups of {build['convrot_group']}" if build.get("convrot_group") else ""
            lines.append(f"`{step}`: {build['format']}{group}: {_count(build['parameters'])} parameters, "
                         f"{build['layers']} layers, video {build['video_width']} / audio {build['audio_width']} wide "
                         f"(switches: {switches or 'none'}); {build['quantized_layers']} Linear layers quantized, "
                         f"loaded as {build['loaded_layer_formats']}; stored {_f(build['stored_gib'])} GiB; compute "
                         f"{build['compute_dtype']}; comfy-kitchen backends: {build.get('kitchen')}; built and loaded "
                         f"in {_f(build['seconds'], 1)} s (peak {_f(build.get('peak_gib'), 1)} GiB). Input: latent "
                         f"{' x '.join(map(str, build['latent']))}, {build['audio_latents']} audio latents, "
                         f"{build['text_tokens']} text tokens, sigma {build['sigma']}.")
            lines.append("")
    lines.append("| step | check or call | result | measured | limit | s | peak GPU GiB | detail |")
    lines.append("|---|---|---|---:|---:|---:|---:|---|")
    for step in LTX25_STEPS:
        for r in _find(records, step):
            if r["name"].startswith("build") and r["status"] == "ok":
                continue
            value = "—" if r.get("value") is None else f"{r['value']:.3g}"
            limit = "—" if r.get("limit") is None else f"{r['limit']:.3g}"
            detail = r.get("detail") or r.get("error") or r.get("reason") or ""
            lines.append(f"| {step} | {r['name']} | {r['status']} | {value} | {limit} | {_f(r.get('seconds'))} | "
                         f"{_f(r.get('peak_gib'))} | {_cell(detail)} |")
    lines.append("")
    return lines
