#!/usr/bin/env bash
# The pack's test command: sets up the runtime on a fresh machine (scripts/env.sh) and runs pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/tiling -q`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export TDP_COMFYUI_DIR
set +e
"$TDP_PYTHON" -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$rc"
