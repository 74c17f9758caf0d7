"""The GPU check: the pack on one CUDA GPU under ComfyUI's defaults (Dynamic VRAM on NVIDIA, no --highvram),
correctness with tiny models, a LoRA under Dynamic VRAM and the memory ComfyUI is asked for (issue 30, items 4
and 5), LTX-2.5 quantized (fp8, int8-convrot) and LTX-2 at their real sizes, in under 9 minutes, written to
bench/results/gpu.md with the peak GPU memory of every step. `--smoke` runs every
step at tiny sizes on the CPU (the test suite does, so the GPU script cannot break unseen) and writes its
report elsewhere.

    python bench/gpu/check.py --comfyui-dir /path/to/ComfyUI            # on a CUDA machine
    python bench/gpu/check.py --smoke --comfyui-dir /path/to/ComfyUI --out /tmp/gpu_smoke.md

On the device machine use `bash bench/gpu/run.sh` (sets up the carried ComfyUI and wheels, no network).

Every step runs in its own process with its own time limit, inside one overall budget: a step that fails,
runs out of memory, crashes or hits its limit is recorded in the report and the next step still runs.
Steps record each measurement as they take it, so a step stopped at its limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = REPO / "bench" / "results" / "gpu.md"
CARRIED_COMFYUI = HERE / "carry" / "comfyui"
sys.path.insert(0, str(HERE))  # the check's own modules (steps, runtime, report, the step modules)

from steps import (GPU_BUDGET_S, MIN_STEP_S, SMOKE_BUDGET_S, SMOKE_LIMIT_S, STEPS, WORK_DIR_MODULES,  # noqa: E402
                   skip_reason)


def default_comfyui_dir() -> Path | None:
    for value in (os.environ.get("COMFYUI_DIR"), os.environ.get("TDP_COMFYUI_DIR"), str(CARRIED_COMFYUI)):
        if value and (Path(value) / "comfy").is_dir():
            return Path(value).resolve()
    return None


# --- child: one step in this process ---------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    """Run one step here; everything it measures, and any error, lands in the records file. 0 if no error."""
    import importlib

    import runtime
    import sizes as sizes_mod

    step = next(s for s in STEPS if s.name == args.child)
    rec = runtime.Records(Path(args.records), step.name)
    try:
        runtime.start(Path(args.comfyui_dir), args.device, Path(args.work_dir) / "comfy_base")
        fn = getattr(importlib.import_module(step.module), step.function)
        if step.module in WORK_DIR_MODULES:
            fn(rec, Path(args.work_dir))
        else:
            fn(rec, sizes_mod.smoke_sizes() if args.smoke else sizes_mod.REAL)
    except BaseException as e:  # recorded for the report; the parent carries on with the next step
        rec.add(step.name, "error", error=f"{type(e).__name__}: {e}"[:800],
                traceback=traceback.format_exc()[-3000:])
        return 1
    finally:  # the step's peak, whatever became of it (torch's allocator peak covers the whole process)
        rec.add(runtime.PEAK_RECORD, "ok", dynamic_vram=runtime.dynamic_vram() if runtime.started() else None,
                **(runtime.memory_now() if runtime.started() else {}))
    return 0


# --- parent: every step in its own process -----------------------------------------------------------------


def environment(args: argparse.Namespace, comfy_dir: Path) -> dict:
    """What the report's header states: device, GPU and its memory, torch, CUDA, ComfyUI, Python."""
    import torch

    from runtime import comfyui_version

    env = {"mode": "smoke run on the CPU (tiny sizes)" if args.smoke else f"GPU run on {args.device}",
           "device": args.device, "torch": torch.__version__, "cuda": torch.version.cuda,
           "comfyui": f"{comfyui_version(comfy_dir)} ({comfy_dir})", "python": platform.python_version()}
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(f"no CUDA device visible to torch {torch.__version__}; use --smoke for the CPU run")
        props = torch.cuda.get_device_properties(torch.device(args.device))
        env["gpu"] = f"{props.name} (compute capability {props.major}.{props.minor}, {props.multi_processor_count} SMs)"
        env["gpu_memory"] = f"{props.total_memory / 2**30:.1f} GiB"
    return env


_running: subprocess.Popen | None = None
"""The step process running now (stopped with the check if the check is stopped)."""


def _on_stop_signal(signum: int, _frame: object) -> None:
    if _running is not None:
        _stop(_running)
    raise SystemExit(f"stopped by signal {signum}")


def run_step(step: Step, args: argparse.Namespace, comfy_dir: Path, work: Path, records: Path, limit_s: float) -> dict:
    """Run `step` in its own process, stopped at `limit_s`; its outcome for the report. A step that died or
    was stopped without recording why gets a record naming its exit and the end of its output."""
    global _running
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", step.name, "--device", args.device,
           "--comfyui-dir", str(comfy_dir), "--records", str(records), "--work-dir", str(work)]
    if args.smoke:
        cmd.append("--smoke")
    log_path = work / f"{step.name}.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = _running = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            rc = proc.wait(timeout=limit_s)
            outcome = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            _stop(proc)
            rc, outcome = None, f"stopped at its limit of {limit_s:.0f} s"
        finally:
            _running = None
    ran = time.monotonic() - started
    tail = log_path.read_text(errors="replace")[-1500:]
    recorded = any(r["step"] == step.name and r["status"] == "error" for r in read_records(records))
    if rc is None or (rc != 0 and not recorded):
        with open(records, "a") as f:
            f.write(json.dumps({"step": step.name, "name": step.name, "status": "timeout" if rc is None else "error",
                                "error": f"{outcome}; log tail: {tail[-600:]}"}) + "\n")
    print(f"[gpu check] {step.name}: {outcome} in {ran:.1f} s", flush=True)
    return {"step": step.name, "limit_s": limit_s, "ran_s": ran, "outcome": outcome}


def _stop(proc: subprocess.Popen) -> None:
    """End the step's process group (the step and anything it started in it): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def read_records(path: Path) -> list[dict]:
    """Every complete record line (a step killed while writing one leaves a partial line, skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def run_parent(args: argparse.Namespace) -> int:
    """Every step (or those of --only) in order, each in its own process within the budget; then the report.
    Exit status 1 if any check failed or any step errored or was stopped at its limit."""
    signal.signal(signal.SIGTERM, _on_stop_signal)
    signal.signal(signal.SIGINT, _on_stop_signal)
    names = {s.name for s in STEPS}
    unknown = sorted(set(args.only.split(",")) - names) if args.only else []
    if unknown:
        raise SystemExit(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(s.name for s in STEPS)}")
    comfy_dir = Path(args.comfyui_dir).resolve() if args.comfyui_dir else default_comfyui_dir()
    if comfy_dir is None or not (comfy_dir / "comfy").is_dir():
        raise SystemExit("no ComfyUI tree: pass --comfyui-dir, set COMFYUI_DIR, or carry one in bench/gpu/carry/comfyui "
                         "(bash bench/gpu/prepare.sh)")
    out = Path(args.out).resolve() if args.out else None
    if args.smoke or not args.device.startswith("cuda"):
        if out is None or out == RESULTS.resolve():
            raise SystemExit(f"a CPU run does not write {RESULTS.relative_to(REPO)}: pass --out elsewhere")
    out = out or RESULTS
    start = time.monotonic()
    env = environment(args, comfy_dir)
    budget = args.budget_s or (SMOKE_BUDGET_S if args.smoke else GPU_BUDGET_S)
    work = Path(tempfile.mkdtemp(prefix="ltx_tdp_gpu_check_"))
    records_path = work / "records.jsonl"
    wanted = [s for s in STEPS if not args.only or s.name in args.only.split(",")]
    steps: list[dict] = []
    for step in wanted:
        reason = skip_reason(step, comfy_dir, env["comfyui"])
        if reason is not None:
            with open(records_path, "a") as f:
                f.write(json.dumps({"step": step.name, "name": step.name, "status": "skip", "reason": reason}) + "\n")
            steps.append({"step": step.name, "outcome": f"skipped: {reason}"})
            continue
        left = budget - (time.monotonic() - start)
        if left < MIN_STEP_S:
            steps.append({"step": step.name, "outcome": f"not run: {left:.0f} s left of the {budget} s budget"})
            continue
        limit = min(SMOKE_LIMIT_S if args.smoke else step.gpu_limit_s, left)
        steps.append(run_step(step, args, comfy_dir, work, records_path, limit))
    records = read_records(records_path)
    env["wall_s"] = f"{time.monotonic() - start:.0f} s for all steps"
    env["attention"] = next((r["attention"] for r in records if r.get("attention")), None)
    dynamic = [r["dynamic_vram"] for r in records if r.get("dynamic_vram") is not None]
    env["model_loading"] = None if not dynamic else (
        "ComfyUI's Dynamic VRAM (main.py's default on NVIDIA)" if all(dynamic) else
        "ComfyUI's estimate-based loading (Dynamic VRAM off: " + ("--cpu" if args.smoke else "comfy-aimdo did not start") + ")")
    out.parent.mkdir(parents=True, exist_ok=True)
    from report import render

    out.write_text(render(env, records, steps))
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "steps": steps, "records": records}, indent=1, default=str))
    if args.log:
        with open(args.log, "w") as f:
            for step in wanted:
                path = work / f"{step.name}.log"
                if path.exists():
                    f.write(f"===== {step.name} =====\n{path.read_text(errors='replace')}\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"[gpu check] report: {out} ({env['wall_s']}{'; step output in ' + args.log if args.log else ''})", flush=True)
    bad = [r for r in records if r["status"] in ("fail", "error", "timeout")]
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--comfyui-dir", help="ComfyUI tree (default: $COMFYUI_DIR, $TDP_COMFYUI_DIR, bench/gpu/carry/comfyui)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (the test suite's run)")
    p.add_argument("--device", help="cuda (default) or cuda:N; the smoke run uses cpu")
    p.add_argument("--out", help=f"report path (default {RESULTS.relative_to(REPO)}; required elsewhere for --smoke)")
    p.add_argument("--json", help="also write every record as JSON here")
    p.add_argument("--log", help="also write every step's output into this one file")
    p.add_argument("--budget-s", type=int, default=0, help="seconds for all steps together")
    p.add_argument("--only", help="comma-separated step names to run (default all): " + ",".join(s.name for s in STEPS))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--records", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    if args.device == "cuda":
        args.device = "cuda:0"
    if args.child:
        return run_child(args)
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
