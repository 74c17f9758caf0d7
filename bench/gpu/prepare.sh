#!/usr/bin/env bash
# Gathers, on a machine with network, what bench/gpu/run.sh needs on a GPU machine without one, into
# bench/gpu/carry/ (git-ignored; about 45 MiB with ComfyUI 0.33.0, inside the device tool's 64 MiB):
#
#   bash bench/gpu/prepare.sh [COMFYUI_TREE]
#
# COMFYUI_TREE defaults to $COMFYUI_SRC, else $COMFYUI_DIR, else CI's read-only ComfyUI 0.33.0 beside the
# checkout (../shared/comfyui-0.33.0, or $LTX_TDP_CI_SHARED/comfyui-0.33.0). The LTX-2.5 steps need 0.32+.
#
#   carry/comfyui  the ComfyUI tree (0.33.0 for the LTX-2.5 steps; 0.24.0 runs the others) minus its tests,
#                  blueprints, API nodes and models
#   carry/wheels   the packages the check's imports of ComfyUI need that the GPU machine's image lacks: the list,
#                  with why each is there, is bench/gpu/carried.txt (the image's packages: image_packages.txt).
#                  comfy-kitchen is repacked without its compiled CUDA/HIP kernels (bench/gpu/strip_wheel.py):
#                  they are built for one CPython and torch and weigh about 230 MB; without them comfy-kitchen
#                  computes with its eager backend. Checked here (bench/gpu/kitchen_check.py): it imports and an
#                  int8-convrot linear runs on the CPU.
#
# ComfyUI's tokenizer data (comfy/text_encoders/*_tokenizer, comfy/sd1_tokenizer: 13 MB) is left out: the check
# builds no text encoder, and av's 35 MB must fit beside the tree in the device tool's 64 MiB.
#
#   TDP_CARRY_DIR  where to gather (default bench/gpu/carry; run.sh reads the same variable)
set -euo pipefail
cd "$(dirname "$0")"
src="${1:-${COMFYUI_SRC:-${COMFYUI_DIR:-${LTX_TDP_CI_SHARED:-../../../shared}/comfyui-0.33.0}}}"
[ -n "$src" ] && [ -d "$src/comfy" ] || { echo "usage: bash bench/gpu/prepare.sh /path/to/ComfyUI (none at $src)" >&2; exit 2; }
if ! grep -q use_keyframes_abs_pos_embedding "$src/comfy/ldm/lightricks/model.py" 2>/dev/null; then
  echo "prepare.sh: $src has no LTX-2.5 (ComfyUI < 0.32): the GPU check will skip its LTX-2.5 steps" >&2
fi
carry="${TDP_CARRY_DIR:-carry}"
rm -rf "$carry/comfyui" "$carry/wheels"
mkdir -p "$carry/comfyui" "$carry/wheels"
(cd "$src" && tar cf - --exclude=./.git --exclude=./tests --exclude=./tests-unit --exclude=./blueprints \
  --exclude=./comfy_api_nodes --exclude=./models --exclude='./comfy/text_encoders/*_tokenizer' \
  --exclude=./comfy/sd1_tokenizer --exclude=./input --exclude=./output --exclude=./custom_nodes \
  --exclude='__pycache__' --exclude=./extra_model_paths.yaml .) | (cd "$carry/comfyui" && tar xf -)
py="${TDP_PYTHON:-python3}"  # the check of comfy-kitchen needs torch (e.g. the test runtime's: scripts/env.sh)
"$py" -c "import torch" 2>/dev/null || { echo "prepare.sh: $py has no torch; set TDP_PYTHON to a python with torch" >&2; exit 2; }
pin() { sed -n "s/^$1 *\(==.*\)$/\1/p" "$src/requirements.txt"; }
download() {  # a wheel for CPython 3.12 on x86-64 Linux (the GPU machine's), no dependencies
  python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d "$1" "$2"
}
grep -v '^#' carried.txt | while read -r line; do
  [ -n "$line" ] || continue
  case "$line" in *==*) name="${line%%==*}"; spec="$line" ;; *) name="$line"; spec="$line$(pin "$line")" ;; esac
  if [ "$spec" = "$name" ]; then echo "prepare.sh: $src/requirements.txt pins no $name: not carried" >&2; continue; fi
  if [ "$name" = comfy-kitchen ]; then
    raw="$(mktemp -d)"
    download "$raw" "$spec"
    wheel="$(python3 strip_wheel.py "$raw"/comfy_kitchen-*.whl "$carry/wheels")"
    rm -rf "$raw"
    check="$(mktemp -d)"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$check" "$wheel"
    PYTHONPATH="$check" "$py" kitchen_check.py
    rm -rf "$check"
  else
    download "$carry/wheels" "$spec"
  fi
done
if compgen -G "$carry/wheels/torch-*" >/dev/null; then echo "prepare.sh: a torch wheel came along" >&2; exit 1; fi
du -sh "$carry/comfyui" "$carry/wheels"
