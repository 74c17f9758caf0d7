#!/usr/bin/env bash
# Builds (once per package list) and prints the path of a Python 3.12 virtual environment holding exactly the GPU
# machine's packages that bench/gpu/image_packages.txt pins, each installed with --no-deps (nothing pip would add):
#
#   python="$(bash bench/gpu/image_env.sh)"
#
# The rehearsal of the GPU check (tests/bench/gpu/test_image_env.py) runs bench/gpu/run.sh with this python as
# `python3`, as the GPU machine runs it with its own. The environment lives in $LTX_TDP_CACHE (default
# ~/.cache/ltx-tdp) as gpu-image-<hash of the list and the Python version>, so a second run takes a second. About
# 5 GB (torch 2.11.0's CUDA build and its CUDA libraries: the image's torch; they are not used on the CPU).
#
#   TDP_IMAGE_PYTHON  the Python 3.12 to build it with (default: python3.12 on PATH, else pyenv's newest 3.12)
# Exit status 3 (and a line on stderr) when no Python 3.12 is found.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
list="$here/image_packages.txt"
cache="${LTX_TDP_CACHE:-$HOME/.cache/ltx-tdp}"
log() { echo "[gpu image env] $*" >&2; }

py="${TDP_IMAGE_PYTHON:-}"
if [ -z "$py" ]; then
  py="$(command -v python3.12 2>/dev/null || true)"
  if [ -n "$py" ] && ! "$py" -c 'import sys' 2>/dev/null; then py=""; fi  # a pyenv shim without 3.12 selected
  if [ -z "$py" ]; then
    py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1 || true)"
  fi
fi
if [ -z "$py" ] || [ "$("$py" -c 'import sys; print(sys.version_info[:2] == (3, 12))' 2>/dev/null)" != True ]; then
  log "no Python 3.12 (the GPU machine's): set TDP_IMAGE_PYTHON"
  exit 3
fi

key="$( { cat "$list"; "$py" -c 'import sys; print(sys.version_info[:2])'; } | sha256sum | cut -c1-12)"
venv="$cache/gpu-image-$key"
mkdir -p "$cache"
exec 8>"$cache/.gpu-image.lock"
flock 8
if [ ! -f "$venv/.complete" ]; then
  log "building $venv from $list with $py (a few minutes and about 5 GB on a fresh machine)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  pins="$(mktemp)"
  grep -E '^[A-Za-z0-9._-]+==' "$list" | sed 's/ *#.*//' > "$pins"
  # --no-deps: exactly the list (setuptools and wheel at the list's versions; the venv's own pip stays).
  "$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps --only-binary=:all: -r "$pins"
  rm -f "$pins"
  touch "$venv/.complete"
fi
flock -u 8
echo "$venv/bin/python"
