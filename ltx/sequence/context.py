"""One device's part of one sharded model call: its rank, its token rows, the exchange, and the memo of cut inputs.

The transformer blocks hand every block the call's whole per-token inputs (timestep modulation, rotary
positions, masks); `ShardContext.cut` cuts each once per call and reuses the cut for the next blocks. While a
block runs (`active`), `gather_kv` all-gathers the keys and values of an attention over video keys once, and
hands the same pair to the further attention calls with those keys (LTX-2.5's guide mask splits the queries
into up to three calls over one k, v).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from .exchange import AllGather
from .shards import shard_guide_mask, shard_ranges, slice_tokens


class ShardContext:
    """Rank `rank` of an exchange whose ranks run devices of relative `speeds`; `before()` raises when the call
    must stop (another device failed, or ComfyUI's interrupt)."""

    def __init__(self, rank: int, speeds: Sequence[float], exchange: AllGather, before: Callable[[], None]):
        self.rank = rank
        self.speeds = tuple(speeds)
        self.exchange = exchange
        self.before = before
        self.tokens = 0
        self.rows = range(0)
        self.active = False
        self._memo: dict[int, tuple[Any, Any]] = {}
        self._kv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def plan(self, tokens: int, avoid: Collection[int]) -> None:
        """Fix this call's shards (at the first block: the video tokens as input processing left them). Every rank
        computes the same ranges from the same inputs."""
        self.tokens = tokens
        self.rows = shard_ranges(tokens, self.speeds, avoid)[self.rank]
        self._memo.clear()

    def cut(self, value: Any, mask: bool = False) -> Any:
        """`value` cut to this rank's rows (`slice_tokens`, or `shard_guide_mask` for a self-attention mask)."""
        if value is None:
            return None
        hit = self._memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        out = shard_guide_mask(value, self.rows, self.tokens) if mask else slice_tokens(value, self.rows, self.tokens)
        self._memo[id(value)] = (value, out)
        return out

    def is_video_keys(self, k: torch.Tensor, dim: int) -> bool:
        """Whether an attention's keys are this rank's video tokens (shards never share a length with another key
        sequence of the call: `shard_ranges(avoid=...)`)."""
        return self.active and k.shape[dim] == len(self.rows) and len(self.rows) < self.tokens

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank's keys and values along `dim`, once per (k, v) pair."""
        if self._kv is not None and self._kv[0] is k:
            return self._kv[1], self._kv[2]
        full_k, full_v = self.exchange.gather(self.rank, (k, v), dim)
        self._kv = (k, full_k, full_v)
        return full_k, full_v

    def end_block(self) -> None:
        self.active = False
        self._kv = None

    def gather_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The whole video token sequence from every rank's shard of `x` (axis 1)."""
        return self.exchange.gather(self.rank, (x,), 1)[0]
