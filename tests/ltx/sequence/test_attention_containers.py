"""The sequence-parallel attention hook meets attention tensor containers (the path newer LTX code takes for every
attention) on ComfyUI 0.33's own `optimized_attention`: 2 ranks in 2 threads each call it with their shard's q, k,
v wrapped in `AttentionTensorContainer`s and the pack's `GatherAttention` (with a recording backend inside it) in
`transformer_options`. ComfyUI unwraps the containers (the hook has no `container_function`); the hook and the
backend get plain tensors, the backend every rank's keys; the two shards' outputs together equal one device's
attention over the whole sequence within fp32 rounding.

Skips where ComfyUI has no AttentionTensorContainer (before 0.33).
"""

from __future__ import annotations

import threading

import pytest
import torch

from ltx_tdp.ltx.sequence.attention import GatherAttention
from ltx_tdp.ltx.sequence.context import ShardContext
from ltx_tdp.ltx.sequence.exchange import AllGather
from ltx_tdp_devkit.ltx_helpers import randn

TOKENS, HEADS, WIDTH = 12, 2, 8


def test_containers_reach_the_hook_as_plain_tensors_and_two_shards_equal_one_device(comfy):
    import comfy.ldm.modules.attention as attention

    if not hasattr(attention, "AttentionTensorContainer"):
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no AttentionTensorContainer")
    q, k, v = (randn(1, TOKENS, WIDTH, seed=s) for s in (1, 2, 3))
    want = attention.optimized_attention(q, k, v, HEADS)
    exchange, outs, seen, errors = AllGather(2), [None, None], [], []
    lock = threading.Lock()

    def backend(func, q, k, v, heads, *args, **kwargs):
        with lock:
            seen.append((type(q), type(k), type(v), q.shape[1], k.shape[1]))
        return func(q, k, v, heads, *args, **kwargs)

    def rank(r: int) -> None:
        try:
            ctx = ShardContext(r, (1.0, 1.0), exchange, lambda: None)
            ctx.plan(TOKENS, set())
            ctx.active = True
            rows = slice(ctx.rows.start, ctx.rows.stop)
            box = attention.AttentionTensorContainer
            options = {"optimized_attention_override": GatherAttention(ctx, backend)}
            outs[r] = attention.optimized_attention(box(q[:, rows]), box(k[:, rows]), box(v[:, rows]), HEADS,
                                                    transformer_options=options)
            exchange.leave(r)
        except Exception as e:  # noqa: BLE001  (reported by the assertion below)
            errors.append(e)
            exchange.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(seen) == [(torch.Tensor,) * 3 + (TOKENS // 2, TOKENS)] * 2, seen
    got = torch.cat(outs, dim=1)
    err = ((got - want).abs().max() / want.abs().max()).item()
    assert err <= 1e-6, f"2 shards with containers differ from one device by {err:.3e} (relative)"
