"""A recording attention backend, set on a model the way an attention-backend node sets one (Sage, Flash, core's
ModelAttentionBackend): ComfyUI 0.33's public `ModelPatcher.set_model_optimized_attention`, or on older ComfyUI the
`transformer_options["optimized_attention_override"]` entry that method writes."""

from __future__ import annotations

import threading
from typing import Any

import torch


class RecordingAttention:
    """An attention function that records (query tokens, key tokens) of every call and computes with ComfyUI's
    PyTorch attention, the default of the tests' CPU runtime (`--use-pytorch-cross-attention`): a model with it
    computes exactly what the model without it computes."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self._lock = threading.Lock()  # MultiGPU devices call it from their threads

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
        import comfy.ldm.modules.attention as attention

        dim = 2 if kwargs.get("skip_reshape", False) else 1
        with self._lock:
            self.calls.append((int(q.shape[dim]), int(k.shape[dim])))
        return attention.attention_pytorch(q, k, v, heads, *args, **kwargs)

    def on(self, model: Any) -> Any:
        """A clone of `model` whose attention runs through this recorder."""
        m = model.clone()
        if hasattr(m, "set_model_optimized_attention"):  # ComfyUI 0.33+
            m.set_model_optimized_attention(self)
        else:
            m.model_options["transformer_options"]["optimized_attention_override"] = (
                lambda _func, *args, **kwargs: self(*args, **kwargs))
        return m

    def take(self) -> list[tuple[int, int]]:
        """The calls recorded so far, and a fresh start."""
        with self._lock:
            calls, self.calls = self.calls, []
        return calls
