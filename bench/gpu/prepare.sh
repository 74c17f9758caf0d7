#!/usr/bin/env bash
# Gathers, on a machine with network, what bench/gpu/run.sh needs on a GPU machine without one, into
# bench/gpu/carry/ (git-ignored; about 25 MiB with ComfyUI 0.33.0, inside the device tool's 64 MiB):
#
#   bash bench/gpu/prepare.sh [COMFYUI_TREE]
#
# COMFYUI_TREE defaults to $COMFYUI_SRC, else $COMFYUI_DIR, else CI's read-only ComfyUI 0.33.0 beside the
# checkout (../shared/comfyui-0.33.0, or $LTX_TDP_CI_SHARED/comfyui-0.33.0). The LTX-2.5 steps need 0.32+.
#
#   carry/comfyui  the ComfyUI tree (0.33.0 for the LTX-2.5 steps; 0.24.0 runs the others) minus its tests,
#                  blueprints, API nodes and models
#   carry/wheels   the packages ComfyUI's model code imports that the GPU machine's image (torch, transformers,
#                  safetensors, einops, ...) lacks, at the versions the tree's requirements.txt pins:
#                  * comfy-aimdo (model management imports it), built for any CPython >= 3.9 (abi3) on x86-64;
#                  * comfy-kitchen (ComfyUI 0.24+: quantized layers, and the RMS/AdaLN kernels 0.33's LTX
#                    models call), repacked without its compiled CUDA/HIP kernels (bench/gpu/strip_wheel.py):
#                    they are built for one CPython and torch and weigh about 230 MB; without them
#                    comfy-kitchen computes with its eager backend. Checked here (bench/gpu/kitchen_check.py):
#                    it imports and an int8-convrot linear runs on the CPU.
set -euo pipefail
cd "$(dirname "$0")"
src="${1:-${COMFYUI_SRC:-${COMFYUI_DIR:-${LTX_TDP_CI_SHARED:-../../../shared}/comfyui-0.33.0}}}"
[ -n "$src" ] && [ -d "$src/comfy" ] || { echo "usage: bash bench/gpu/prepare.sh /path/to/ComfyUI (none at $src)" >&2; exit 2; }
if ! grep -q use_keyframes_abs_pos_embedding "$src/comfy/ldm/lightricks/model.py" 2>/dev/null; then
  echo "prepare.sh: $src has no LTX-2.5 (ComfyUI < 0.32): the GPU check will skip its LTX-2.5 steps" >&2
fi
rm -rf carry/comfyui carry/wheels
mkdir -p carry/comfyui carry/wheels
(cd "$src" && tar cf - --exclude=./.git --exclude=./tests --exclude=./tests-unit --exclude=./blueprints \
  --exclude=./comfy_api_nodes --exclude=./models --exclude=./input --exclude=./output --exclude=./custom_nodes \
  --exclude='__pycache__' --exclude=./extra_model_paths.yaml .) | (cd carry/comfyui && tar xf -)
py="${TDP_PYTHON:-python3}"  # the check of comfy-kitchen needs torch (e.g. the test runtime's: scripts/env.sh)
"$py" -c "import torch" 2>/dev/null || { echo "prepare.sh: $py has no torch; set TDP_PYTHON to a python with torch" >&2; exit 2; }
pin() { sed -n "s/^$1 *\(==.*\)$/\1/p" "$src/requirements.txt"; }
download() {  # a wheel for CPython 3.12 on x86-64 Linux (the GPU machine's), no dependencies
  python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d "$1" "$2"
}
aimdo="$(pin comfy-aimdo)"
if [ -n "$aimdo" ]; then download carry/wheels "comfy-aimdo$aimdo"; fi
kitchen="$(pin comfy-kitchen)"
if [ -n "$kitchen" ]; then
  raw="$(mktemp -d)"
  download "$raw" "comfy-kitchen$kitchen"
  wheel="$(python3 strip_wheel.py "$raw"/comfy_kitchen-*.whl carry/wheels)"
  rm -rf "$raw"
  check="$(mktemp -d)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$check" "$wheel"
  PYTHONPATH="$check" "$py" kitchen_check.py
  rm -rf "$check"
fi
du -sh carry/comfyui carry/wheels
