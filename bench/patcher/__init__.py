"""The TDP model patcher's benchmark (not a test): wrapper overhead, and where tiling starts to pay.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_patcher.py'

`cases` (the benchmark's model and the latent sizes measured), `measure` (one model call through ComfyUI's
wrapper chain, patched and bare, timed), `report` (bench/results/patcher.md and patcher_scaling.png). The script
bench/bench_patcher.py starts ComfyUI and runs them. Imported as `ltx_tdp.bench.patcher`.
"""
