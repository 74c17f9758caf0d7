"""The ComfyUI-aware LTX layer between nodes/ and tiling/, cut the same way for both paths:

* `ltx.model`: a tiled model call (call, guides, positions, audio), the patch on a clone (`apply_tdp`) and
  the job a worker rank runs;
* `ltx.vae`: a tiled decode (settings, inputs, blocks, decode loop), the decoders' reach and quality presets,
  and the job a worker rank runs.

`ltx.replica` is what both replicate to worker ranks; `ltx.progress` ComfyUI's progress bar and interrupt.
"""
