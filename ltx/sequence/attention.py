"""The attention hook: attention over video keys sees every video token.

ComfyUI's attention functions call `transformer_options["optimized_attention_override"](func, q, k, v, heads,
...)` when it is set (ComfyUI 0.24+; before that, there is no core MultiGPU to shard over). `GatherAttention`
replaces the keys and values of an attention whose keys are this rank's video shard with every rank's (an
all-gather, `ShardContext.gather_kv`): LTX video self-attention, and LTX-2's `video_to_audio_attn` (audio queries,
video keys). Queries stay this rank's. Text cross-attention, audio self-attention and LTX-2's audio-to-video
attention (video queries, audio keys) keep their own keys. An override already set (e.g. a node that picks the
attention backend) still runs, with the gathered keys.
"""

from __future__ import annotations

from typing import Any

import torch

from .context import ShardContext


class GatherAttention:
    """optimized_attention_override for one rank of a sharded call."""

    def __init__(self, context: ShardContext, inner: Any = None):
        self.context = context
        self.inner = inner

    def __call__(self, func: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
        dim = 2 if kwargs.get("skip_reshape", False) else 1
        if self.context.is_video_keys(k, dim):
            k, v = self.context.gather_kv(k, v, dim)
            if q.shape[dim] == 0 and dim == 1:  # a guide-mask query group with no rows on this shard
                return q.new_empty((q.shape[0], 0, v.shape[-1]))
        if self.inner is not None:
            return self.inner(func, q, k, v, heads, *args, **kwargs)
        return func(q, k, v, heads, *args, **kwargs)
