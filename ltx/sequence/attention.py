"""The attention hook: attention over video keys sees every video token.

`GatherAttention` replaces the keys and values of an attention whose keys are this rank's video shard with every
rank's (an all-gather, `ShardContext.gather_kv`): LTX video self-attention, and LTX-2's `video_to_audio_attn`
(audio queries, video keys). Queries stay this rank's. Text cross-attention, audio self-attention and LTX-2's
audio-to-video attention (video queries, audio keys) keep their own keys. An override already set (an
attention-backend node: Sage, Flash, core's ModelAttentionBackend) still runs, with the gathered keys.

What the hook assumes of ComfyUI, all here (ComfyUI 0.24 to 0.33, comfy/ldm/modules/attention.py `wrap_attn`):

* every attention function ComfyUI's LTX models call is wrapped so that, when
  `transformer_options["optimized_attention_override"]` is set, it calls `override(func, q, k, v, heads, *args,
  **kwargs)` (`func` the attention it would have run; `skip_reshape` in kwargs: q, k, v are (B, heads, N, d),
  else (B, N, heads x d)) and returns what the override returns; the override is called once per attention, and
  `func` (or an inner override) with `_inside_attn_wrapper` set does not call the override again;
* an override set before the pack is in the options the pack receives (a backend node writes it with
  `ModelPatcher.set_model_optimized_attention` in 0.33, into the model options' transformer options before);
* attention tensor containers (`AttentionTensorContainer`, 0.33, which LTX does not use there; ComfyUI 0.40 passes
  them for every model): when containers come and the outermost override has no `container_function`, ComfyUI
  unwraps them to plain tensors before the call. `GatherAttention` has none, so it and the override inside it get
  plain tensors, and a backend's container path (its `container_function`) is not used under sequence
  parallelism: it runs as on plain tensors.

A ComfyUI that breaks one of these fails tests/ltx/sequence/test_sequence_attention_override.py (a recording
override must see every call, with a shard's queries and every shard's keys).
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
