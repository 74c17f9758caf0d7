"""The block hook: each transformer block runs on this rank's video tokens.

LTX's `_process_transformer_blocks` calls `transformer_options["patches_replace"]["dit"][("double_block", i)]`
with the block's inputs (LTXV and LTX-2.5 video: img, txt, vec, pe, self_attention_mask, ...; LTX-2 audio-video:
img = (video, audio), v_/a_ context, timesteps and positions) and {"original_block": ...}. `ShardBlock`:

* block 0 fixes the shards (`ShardContext.plan`) and keeps this rank's rows of the video tokens; later blocks get
  the shard back from the block before;
* every block runs on the video shard with its per-token inputs cut to the same rows (timestep modulation,
  rotary positions, LTX-2's cross-modal timesteps and positions, the guide attention mask); the audio stream and
  the text stay whole on every rank;
* the last block gathers the shards, so every rank's output processing sees the whole sequence.

A replace set before (another node's) still runs, with the cut inputs.
"""

from __future__ import annotations

from typing import Any

from .context import ShardContext

VIDEO_ROWS = ("vec", "pe", "v_timestep", "v_pe", "v_cross_pe", "v_cross_scale_shift_timestep",
              "v_cross_gate_timestep")
"""Block inputs with a video token axis (LTXV / LTX-2.5 names, then LTX-2 audio-video names)."""
OTHER_KEYS = ("txt", "v_context", "a_context")
"""Block inputs whose length is a key sequence of some attention (text contexts)."""


class ShardBlock:
    """The ("double_block", index) replace of one rank; `last` is the model's last block index."""

    def __init__(self, index: int, last: int, context: ShardContext, inner: Any = None):
        self.index = index
        self.last = last
        self.context = context
        self.inner = inner

    def __call__(self, args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        ctx = self.context
        ctx.before()
        img = args["img"]
        pair = isinstance(img, (tuple, list))
        video = img[0] if pair else img
        if self.index == 0:
            avoid = {int(args[k].shape[1]) for k in OTHER_KEYS if getattr(args.get(k), "ndim", 0) >= 2}
            if pair and img[1].numel():
                avoid.add(int(img[1].shape[1]))
            ctx.plan(int(video.shape[1]), avoid)
            video = video[:, ctx.rows.start:ctx.rows.stop].contiguous()
        cut = {k: ctx.cut(args[k]) for k in VIDEO_ROWS if k in args}
        cut["self_attention_mask"] = ctx.cut(args.get("self_attention_mask"), mask=True)
        cut["img"] = (video, img[1]) if pair else video
        ctx.active = True
        try:
            out = self.inner(args | cut, extra) if self.inner is not None else extra["original_block"](args | cut)
        finally:
            ctx.end_block()
        if self.index == self.last:
            result = out["img"]
            if pair:
                out = {**out, "img": (ctx.gather_tokens(result[0]), result[1])}
            else:
                out = {**out, "img": ctx.gather_tokens(result)}
        return out
