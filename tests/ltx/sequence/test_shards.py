"""Shards of the video tokens and a block's inputs cut to them: sized by speed, never as long as another key
sequence, and cut so that the shard's rows equal the whole input's rows (ComfyUI's own CompressedTimestep and
GuideAttentionMask where this ComfyUI has them)."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import randn


def test_shards_cover_the_tokens_by_speed_and_avoid_other_key_lengths():
    from ltx_tdp.ltx.sequence.shards import shard_ranges

    assert shard_ranges(240, [1.0, 2.0, 1.0]) == (range(0, 60), range(60, 180), range(180, 240))
    for tokens, speeds, avoid in ((240, [1.0, 1.0], {120}), (240, [1.0, 1.0, 1.0], {80, 81}), (7, [1.0] * 3, {2})):
        ranges = shard_ranges(tokens, speeds, avoid)
        assert ranges[0].start == 0 and ranges[-1].stop == tokens, ranges
        assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:])), ranges
        assert all(len(r) >= 1 and len(r) not in avoid for r in ranges), (tokens, avoid, ranges)
    assert all(len(r) == 1 for r in shard_ranges(3, [0.0, 1.0, 1.0])), "a device of speed 0 still gets a token"
    with pytest.raises(ValueError, match="cannot be cut"):
        shard_ranges(2, [1.0, 1.0, 1.0])


def test_per_token_inputs_are_cut_on_their_token_axis_only():
    from ltx_tdp.ltx.sequence.shards import slice_tokens

    per_token, broadcast = randn(2, 12, 5), randn(2, 1, 5)
    pe = (randn(1, 12, 2, 4, 2, 2), True)
    rows = range(4, 9)
    cut = slice_tokens((per_token, broadcast, pe), rows, 12)
    assert torch.equal(cut[0], per_token[:, 4:9]) and cut[1] is broadcast
    assert torch.equal(cut[2][0], pe[0][:, 4:9]) and cut[2][1] is True


def test_a_compressed_timestep_is_cut_to_the_same_modulation_rows(comfy):
    try:
        from comfy.ldm.lightricks.av_model import CompressedTimestep
    except ImportError:
        pytest.skip("this ComfyUI has no LTX-2 (CompressedTimestep)")
    from ltx_tdp.ltx.sequence.shards import slice_tokens

    per_frame = randn(1, 3, 12, seed=1)  # 3 frames of 4 tokens, 2 parameters of width 6
    whole = CompressedTimestep(per_frame, 4, per_frame=True)
    table = randn(2, 6, seed=2)
    for rows in (range(0, 5), range(5, 7), range(6, 12)):
        cut = slice_tokens(whole, rows, 12)
        assert cut.expand().shape[1] == len(rows)
        for a, b in zip(cut.expand_for_computation(table, 1), whole.expand_for_computation(table, 1)):
            assert torch.equal(a, b[:, rows.start:rows.stop]), rows


def test_a_guide_mask_keeps_its_rows_in_shard_numbering(comfy):
    try:
        from comfy.ldm.lightricks.model import GuideAttentionMask
    except ImportError:
        pytest.skip("this ComfyUI has no guide attention mask")
    from ltx_tdp.ltx.sequence.shards import shard_guide_mask

    tokens, guide, tracked = 20, 12, 8
    mask = GuideAttentionMask(tokens, guide, tracked, torch.linspace(0.2, 0.9, tracked)[None])

    def dense(m, rows: int) -> torch.Tensor:
        """The (rows, tokens) additive mask `m` stands for: noisy rows, tracked rows, then unmasked rows."""
        out = torch.zeros(rows, tokens)
        out[:m.guide_start] = m.noisy_mask[0, 0, 0]
        out[m.guide_start:m.guide_start + m.tracked_count] = m.tracked_mask[0, 0]
        return out

    full = dense(mask, tokens)
    for rows in (range(0, 7), range(7, 15), range(15, 20), range(12, 20)):
        part = shard_guide_mask(mask, rows, tokens)
        assert isinstance(part, GuideAttentionMask)
        assert torch.equal(dense(part, len(rows)), full[rows.start:rows.stop]), rows
