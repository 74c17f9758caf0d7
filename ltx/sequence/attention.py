"""The attention hook: attention over video keys sees every video token.

`GatherAttention` replaces the keys and values of an attention whose keys are this rank's video shard with every
rank's (an all-gather, `ShardContext.gather_kv`): LTX video self-attention, and LTX-2's `video_to_audio_attn`
(audio queries, video keys). Queries stay this rank's. Text cross-attention, audio self-attention and LTX-2's
audio-to-video attention (video queries, audio keys) keep their own keys. An override already set (an
attention-backend node: Sage, Flash, core's ModelAttentionBackend) still runs, with the gathered keys.

What the hook assumes of ComfyUI's `wrap_attn` (0.24 to 0.33) is listed with every other internal in
ltx/comfy_internals.py (`wrap_attn`, `OVERRIDE_CALL`): an override in `transformer_options` is called once per
attention as `override(func, q, k, v, heads, *args, **kwargs)` (`skip_reshape` in kwargs: q, k, v are
(B, heads, N, d), else (B, N, heads x d)); attention tensor containers (0.33's `AttentionTensorContainer`, which
ComfyUI 0.40 passes for every model) are unwrapped to plain tensors first, because `GatherAttention` has no
`container_function`, so a backend's container path is not used under sequence parallelism: it runs as on plain
tensors. tests/ltx/test_comfy_internals.py pins the call, containers included;
tests/ltx/sequence/test_sequence_attention_override.py shows a recording override on every shard with every
shard's keys.
"""

from __future__ import annotations

from typing import Any

import torch

from .context import ShardContext


PREFERRED = "comfy_attention"
"""The attribute through which newer ComfyUI gives an attention layer its own attention function (an object whose
`function` is that function, or None), passed to `optimized_attention` as `preferred_attention=`; its `wrap_attn`
calls any override in the function's place (ComfyUI master, commit 8d534945, "Add comfy_attention and
AttentionTensorContainer to a few models"). ComfyUI 0.33 has no such attribute."""


def layers_with_own_attention(module: torch.nn.Module) -> list[str]:
    """The names of `module`'s layers that carry their own attention function (`PREFERRED` with a `function` set:
    int8 attention chosen from a checkpoint's metadata, say). Under LTX Sequence Parallel ComfyUI would run the
    default attention there instead, a different result from one device, so the node refuses such a model."""
    return [name for name, layer in module.named_modules()
            if getattr(getattr(layer, PREFERRED, None), "function", None) is not None]


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
