"""The pack against Lightricks' own tiled samplers (LTXV Tiled Fusion Sampler, LTXV Tiled Sampler), measured on
the quality benchmark's trained model, for every sampler users pick; and shifted tile grids on top of the pack.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/fusion/run.py'

`config` (frozen settings: the cases, samplers, the peer's defaults on this model), `peer` (the peer's two
methods rebuilt from their public description), `shifted` (the pack with a grid that moves between model
calls), `methods` (every method as users run it, with the model tokens it processes), `sweep` (the figures,
cached), `report` (bench/results/fusion.md), `verdicts` (its verdicts), `crops` (its pictures). The model, data
and metrics are the quality benchmark's (`bench/quality`). Imported as `ltx_tdp.bench.fusion`.
"""
