#!/usr/bin/env bash
# The GPU check on a CUDA machine without network (e.g. the device machine), from the repository root:
#
#   bash bench/gpu/run.sh [check.py options]
#
# Uses the machine's own python3 and torch. ComfyUI comes from $COMFYUI_DIR or bench/gpu/carry/comfyui, and
# packages ComfyUI's model code needs that the machine lacks from bench/gpu/carry/wheels (both gathered
# beforehand by `bash bench/gpu/prepare.sh` on a machine with network). Writes bench/results/gpu.md; when
# $OUT is set (the device tool's output folder) copies the report, every record (gpu.json) and the
# steps' output (gpu_steps.log) there.
#
#   TDP_CARRY_DIR  what prepare.sh gathered (default bench/gpu/carry)
#   TDP_GPU_SITE   where the carried wheels are installed (default /tmp/ltx_tdp_gpu_site)
set -euo pipefail
cd "$(dirname "$0")/../.."
carry="${TDP_CARRY_DIR:-bench/gpu/carry}"
if compgen -G "$carry/wheels/*.whl" >/dev/null; then
  site="${TDP_GPU_SITE:-/tmp/ltx_tdp_gpu_site}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$carry"/wheels/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
comfy="${COMFYUI_DIR:-$carry/comfyui}"
[ -d "$comfy/comfy" ] || { echo "no ComfyUI at $comfy: run bench/gpu/prepare.sh first or set COMFYUI_DIR" >&2; exit 2; }
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"  # the test kit (ltx_tdp_devkit): tiny models, configs
extra=()
if [ -n "${OUT:-}" ]; then extra=(--json "$OUT/gpu.json" --log "$OUT/gpu_steps.log"); fi
set +e
python3 bench/gpu/check.py --comfyui-dir "$comfy" "${extra[@]}" "$@"
rc=$?
set -e
if [ -n "${OUT:-}" ] && [ -f bench/results/gpu.md ]; then cp bench/results/gpu.md "$OUT/gpu.md"; fi
exit "$rc"
