#!/usr/bin/env bash
# Gathers, on a machine with network, what bench/gpu/run.sh needs on a GPU machine without one, into
# bench/gpu/carry/ (git-ignored; about 22 MiB, inside the device tool's 64 MiB):
#
#   bash bench/gpu/prepare.sh [COMFYUI_TREE]     # default: $COMFYUI_SRC, else $COMFYUI_DIR
#
#   carry/comfyui  the ComfyUI tree (with LTX-2, e.g. 0.24.0) minus its tests, blueprints, API nodes and models
#   carry/wheels   comfy-aimdo at the version the tree's requirements.txt pins: ComfyUI's model management
#                  imports it, and the GPU machine's image (torch, transformers, safetensors, einops, ...)
#                  lacks it. Its wheel is built for any CPython >= 3.9 (abi3) on x86-64 Linux.
set -euo pipefail
cd "$(dirname "$0")"
src="${1:-${COMFYUI_SRC:-${COMFYUI_DIR:-}}}"
[ -n "$src" ] && [ -d "$src/comfy" ] || { echo "usage: bash bench/gpu/prepare.sh /path/to/ComfyUI" >&2; exit 2; }
rm -rf carry/comfyui carry/wheels
mkdir -p carry/comfyui carry/wheels
(cd "$src" && tar cf - --exclude=./.git --exclude=./tests --exclude=./tests-unit --exclude=./blueprints \
  --exclude=./comfy_api_nodes --exclude=./models --exclude=./input --exclude=./output --exclude=./custom_nodes \
  --exclude='__pycache__' --exclude=./extra_model_paths.yaml .) | (cd carry/comfyui && tar xf -)
aimdo="$(sed -n 's/^comfy-aimdo *\(==.*\)$/\1/p' "$src/requirements.txt")"
if [ -n "$aimdo" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
    -d carry/wheels "comfy-aimdo$aimdo"
fi
du -sh carry/comfyui carry/wheels
