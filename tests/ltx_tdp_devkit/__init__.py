"""The pack's development kit (never shipped): tiny real LTX models built with ComfyUI's own classes, ComfyUI
in this process and as a headless server, API prompts, ComfyUI's templates and frontend, multi-GPU probes.

The test suite, the benchmarks (bench/) and the scripts (scripts/) import it as `ltx_tdp_devkit`: pytest
through `pythonpath` in pyproject.toml, everything else through the PYTHONPATH that scripts/env.sh sets.
"""
