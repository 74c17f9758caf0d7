"""Stage 1 over every device: LTX Sequence Parallel measured and costed.

`comm` (the bytes each device receives per model call for LTX-2.5's stage 1, the time over NVLink and PCIe
against the compute, and where the exchange stops paying: pure arithmetic, no torch, no ComfyUI), `speed`
(2 devices against 1 on this CPU, in one run: a stage-1 model call and the whole two-stage run) and their
pages in bench/results/. Imported as `ltx_tdp.bench.sequence`.
"""
