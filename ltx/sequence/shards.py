"""Which video tokens each device runs, and a block's inputs cut to those tokens (pure torch, no ComfyUI import).

A shard is a contiguous range of the video token sequence as the model's input processing leaves it (after
guide tokens are appended and filtered), so keyframe and guide tokens shard like every other video token.
Per-token inputs (the block's timestep modulation, rotary positions, guide attention masks) are cut to the same
rows; values without a video-token axis stay whole.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

import torch

from ...tiling.shares import device_shares, unit_ranges


def shard_ranges(tokens: int, speeds: Sequence[float], avoid: Collection[int] = ()) -> tuple[range, ...]:
    """Contiguous token ranges, one per device in order, covering [0, tokens), sized by `speeds`
    (`tiling.shares.device_shares`), each non-empty, and none of a length in `avoid`.

    The attention hook tells video keys from other keys (text, audio) by their length, so no shard may be as long
    as another key sequence of the call: a shard that would be is moved by a token or two, which costs nothing
    measurable. Raises ValueError when there are fewer tokens than devices."""
    n = len(speeds)
    if tokens < n:
        raise ValueError(f"{tokens} video tokens cannot be cut into {n} shards")
    sizes = list(device_shares(tokens, [max(s, 1e-9) for s in speeds]))
    for i in range(n):  # every device gets at least one token
        while sizes[i] == 0:
            j = max(range(n), key=lambda k: sizes[k])
            sizes[j] -= 1
            sizes[i] += 1
    bad = set(avoid)
    for _ in range(4 * n * (len(bad) + 1)):
        clash = [i for i in range(n) if sizes[i] in bad]
        if not clash:
            break
        i = clash[0]
        j = i + 1 if i + 1 < n else i - 1
        step = 1 if sizes[i] > 1 else -1
        sizes[i] -= step
        sizes[j] += step
    if any(s in bad or s < 1 for s in sizes):
        raise ValueError(f"no shards of {tokens} tokens over {n} devices avoid the key lengths {sorted(bad)}")
    return unit_ranges(sizes)


def slice_tokens(value: Any, rows: range, tokens: int) -> Any:
    """`value` cut to the token rows `rows` where its axis 1 is the video token axis (length `tokens`): tensors,
    tuples and lists of them, and LTX-2's CompressedTimestep (per-frame rows, returned per token); anything else
    (a per-call broadcast row, flags) as it is."""
    if isinstance(value, torch.Tensor):
        if value.ndim >= 2 and value.shape[1] == tokens:
            return value[:, rows.start:rows.stop]
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(slice_tokens(v, rows, tokens) for v in value)
    if type(value).__name__ == "CompressedTimestep":
        return _compressed_rows(value, rows, tokens)
    return value


def _compressed_rows(value: Any, rows: range, tokens: int) -> Any:
    """A CompressedTimestep's rows `rows`, still per frame: the frames the rows touch, whose modulation is computed
    per frame and expanded as the whole one's is, then cut to the rows (`_shard_class`). Memory: the shard's
    rows, never the whole sequence's per-token modulation."""
    per = int(value.patches_per_frame)
    if value.num_frames * per != tokens:
        return value
    if per == 1:
        return type(value)(value.data[:, rows.start:rows.stop], None)
    first, last = rows.start // per, -(-rows.stop // per)
    out = object.__new__(_shard_class(type(value)))
    out.data = value.data[:, first:last]
    out.batch_size, out.num_frames, out.patches_per_frame = value.batch_size, last - first, per
    out.feature_dim = value.feature_dim
    out.offset, out.length = rows.start - first * per, len(rows)
    return out


@functools.cache
def _shard_class(base: type) -> type:
    """A subclass of ComfyUI's CompressedTimestep (the model tells it from a tensor with isinstance) whose
    per-token values are its frames' expanded, from token `offset` on, `length` of them."""

    class ShardTimestep(base):
        __slots__ = ("offset", "length")

        def expand(self) -> torch.Tensor:
            return super().expand()[:, self.offset:self.offset + self.length]

        def expand_for_computation(self, scale_shift_table: torch.Tensor, batch_size: int,
                                   indices: slice = slice(None, None)) -> tuple[torch.Tensor, ...]:
            values = super().expand_for_computation(scale_shift_table, batch_size, indices)
            return tuple(v[:, self.offset:self.offset + self.length] for v in values)

    return ShardTimestep


def shard_guide_mask(mask: Any, rows: range, tokens: int) -> Any:
    """The self-attention mask of the shard's query rows. LTX-2.5's GuideAttentionMask (queries split into noisy
    rows before `guide_start`, `tracked_count` tracked guide rows, then the rest; keys: all `tokens`) becomes one
    of the same kind in shard-local row numbers; a dense mask keeps its rows; None stays None."""
    if mask is None:
        return None
    if isinstance(mask, torch.Tensor):
        if mask.ndim >= 2 and mask.shape[-2] == tokens:
            return mask[..., rows.start:rows.stop, :]
        return mask
    if not hasattr(mask, "tracked_mask"):
        raise ValueError(f"LTX Sequence Parallel cannot cut a self-attention mask of type {type(mask).__name__}")
    start, stop = rows.start, rows.stop
    guide, end = int(mask.guide_start), int(mask.guide_start) + int(mask.tracked_count)
    first, last = max(guide, start), max(max(guide, start), min(end, stop))
    out = object.__new__(type(mask))
    out.guide_start = min(max(guide - start, 0), stop - start)
    out.tracked_count = last - first
    out.noisy_mask = mask.noisy_mask
    out.tracked_mask = mask.tracked_mask[:, :, first - guide:last - guide, :]
    return out
