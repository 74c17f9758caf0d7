"""LTX Sequence Parallel on the device, with the test suite's tiny transformer (seconds).

One GPU has no second device for ComfyUI's MultiGPU, so the node itself is a no-op there (checked bit for bit);
the engine is checked by running two ranks of one call on this device, in two threads, through the node's own
block and attention hooks (`ltx.sequence.run.sharded_options`) and its all-gather, against the unpatched call.
That measures what the CPU cannot: the device's attention and matrix kernels on shard-sized shapes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from correctness import LATENT, SIGMA, relative
from models import call_inputs, load_tiny_transformer, model_call
from runtime import Records

SEQUENCE_LIMIT = 1e-4
"""Two ranks against one call in fp32: max |diff| / max |x0|. The CPU measures 0 here (2e-6 over sampling runs,
docs/sequence-parallel.md); GPU kernels pick their blocking by shape, and TF32 (where ComfyUI enables it)
rounds products to 10 mantissa bits."""


def _two_ranks(patcher: Any, inputs: Any, sigma: float) -> torch.Tensor:
    """One call as two ranks of the sequence-parallel engine on this device (rank 0's output)."""
    from ltx_tdp.ltx.sequence.context import ShardContext
    from ltx_tdp.ltx.sequence.exchange import AllGather
    from ltx_tdp.ltx.sequence.run import block_count, sharded_options

    exchange = AllGather(2)
    blocks = block_count(patcher.model)
    t = torch.full((inputs.x.shape[0],), sigma, device=inputs.x.device)
    outs: list[Any] = [None, None]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            options = sharded_options({"wrappers": patcher.wrappers}, ShardContext(r, (1.0, 1.0), exchange,
                                                                                   lambda: None), blocks)
            with torch.inference_mode():
                outs[r] = patcher.model.apply_model(inputs.x, t, c_crossattn=inputs.context,
                                                    transformer_options=options, **inputs.kwargs)
        except BaseException as e:  # noqa: BLE001 (re-raised below, after both ranks stopped)
            exchange.abort()
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    if not torch.equal(outs[0], outs[1]):
        raise AssertionError("the two ranks' outputs differ")
    return outs[0]


def sequence_parallel_on_one_device(rec: Records, base_dir: Path) -> None:
    """The node without MultiGPU clones == unpatched (bit for bit); two ranks == unpatched within SEQUENCE_LIMIT."""
    from ltx_tdp.ltx.sequence import apply_sequence_parallel

    model = load_tiny_transformer(base_dir, torch.float32)
    inputs = call_inputs(model, LATENT, 5, 8, seed=6)
    want = model_call(model, inputs, SIGMA)
    got = model_call(apply_sequence_parallel(model), inputs, SIGMA)
    equal = torch.equal(got, want)
    rec.add("sequence parallel, one device == unpatched", "ok" if equal else "fail",
            value=(got.double() - want.double()).abs().max().item(), limit=0.0, detail=f"bit-identical: {equal}")
    two = _two_ranks(model, inputs, SIGMA)
    err = relative(two, want)
    rec.add("sequence parallel, 2 ranks on this device == unpatched", "ok" if err <= SEQUENCE_LIMIT else "fail",
            value=err, limit=SEQUENCE_LIMIT, detail=f"x0 {tuple(want.shape)} on {want.device}; max |diff| / max |x0| "
            f"= {err:.2e}; bit-identical: {torch.equal(two, want)}")
