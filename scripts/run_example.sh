#!/usr/bin/env bash
# The pack's main job in one command: a trained LTX model refines a video twice its trained size, untiled and with
# TDP 2 x 2, through a headless ComfyUI; one picture shows both against the ground truth.
#
#   bash scripts/run_example.sh [OUT_DIR]      (default ./tdp_output)
#
# Sets up the runtime on a fresh machine (scripts/env.sh: the same venv and ComfyUI as the tests; set COMFYUI_DIR
# to use another ComfyUI), starts ComfyUI with this pack in a temporary base directory holding the quality
# benchmark's trained LTXV (bench/quality/trained/) and a synthetic latent video, runs one prompt through
# POST /prompt, and writes OUT_DIR/ltx_tdp_example.png, the frames, the latents and the prompt. Extra arguments
# go to scripts/run_example.py (e.g. --tiles 3 3 --overlap 4).
# The server is always stopped; on failure the exit status is non-zero and the server log tail is shown.
set -euo pipefail
_repo="$(cd "$(dirname "$0")/.." && pwd)"
_t0=$SECONDS
source "$_repo/scripts/env.sh"

_base="$(mktemp -d "${TMPDIR:-/tmp}/ltx-tdp-example.XXXXXX")"
_cleanup() {
  # run_example.py stops its server itself; this catches a driver that died without its `finally`. The
  # server is found by its unique base directory and stopped with its process group.
  local pid
  for pid in $(pgrep -f -- "--base-directory $_base" || true); do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    sleep 2
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$_base"
}
trap _cleanup EXIT

_out="${1:-tdp_output}"
[ "$#" -gt 0 ] && shift
echo "[ltx-tdp example] runtime ready after $((SECONDS - _t0)) s"
# In the background so that a signal reaches this shell at once; it is passed on to the driver, whose
# `finally` stops the server.
"$TDP_PYTHON" "$_repo/scripts/run_example.py" "$_out" --base-dir "$_base" --comfyui-dir "$TDP_COMFYUI_DIR" "$@" &
_py=$!
trap 'kill -TERM "$_py" 2>/dev/null; wait "$_py"; exit 130' INT
trap 'kill -TERM "$_py" 2>/dev/null; wait "$_py"; exit 143' TERM
_rc=0
wait "$_py" || _rc=$?
exit "$_rc"
