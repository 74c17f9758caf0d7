"""Quality benchmark: a small LTXV trained here on synthetic latent videos, and what TDP's per-step blend buys.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/quality/run.py'

`config` (frozen settings and their cache key), `data` (the synthetic latent videos), `metrics` (PSNR,
border band, seam score), `model` (ComfyUI's LTXVModel, saved and loaded as users load one), `train`
(rectified-flow training through ComfyUI's model sampling, cached), `methods` (the five ways to refine a
large frame, all through ComfyUI's samplers and the pack's nodes), `sweep` and `report` (tables, figures).
Imported as `ltx_tdp.bench.quality` (the checkout registered as the package `ltx_tdp`).
"""
