"""The exchange on paper (bench/sequence/comm.py): the token count, the bytes each device receives counted shard
by shard, the compute against a direct count at one device, and the committed page is the script's output."""

from __future__ import annotations

import pytest

from ltx_tdp.bench.sequence import comm


def test_stage1_tokens_are_half_size_cells_rounded_up_times_latent_frames():
    assert comm.stage1_tokens(1920, 1080) == 16 * 17 * 30  # 960 x 540 px -> 30 x 16.875 cells -> 17
    assert comm.stage1_tokens(3840, 2160) == 16 * 34 * 60
    assert comm.stage1_tokens(1920, 1088, frames=9) == 2 * 17 * 30


@pytest.mark.parametrize("devices", [1, 2, 3, 4, 8])
def test_each_device_receives_the_keys_and_values_of_every_other_shard(devices):
    tokens, model = 8160, comm.LTX25
    shards = [tokens / devices] * devices
    counted = sum(shards[1:]) * 2 * (model.video_inner + model.audio_inner) * model.bytes_per_value
    got = comm.bytes_received_per_layer(tokens, devices)
    assert got == pytest.approx(counted, rel=1e-12), (got, counted)
    assert (got == 0) == (devices == 1)


def test_one_device_computes_a_layer_as_counted_by_hand():
    """At 1 device and a tiny made-up transformer the layer's FLOPs are a sum one can redo on paper."""
    model = comm.Transformer(layers=1, video_inner=4, audio_inner=2, ff_mult=4, text_tokens=3, audio_tokens=5)
    n, d, a, t, na = 10, 4, 2, 3, 5
    video = n * (8 * d * d + 4 * d * d + 16 * d * d + 8 * d * a + 4 * n * d + 4 * t * d + 4 * na * a)
    audio = na * (36 * a * a + 4 * na * a + 4 * t * a + 4 * n * a)
    assert comm.flops_per_layer(n, 1, model) == video + audio + 4 * t * d * d + 4 * t * a * a


def test_the_speedup_is_below_the_device_count_and_grows_with_the_size_and_the_link():
    gpu, nvlink, host = comm.GPUS[0], comm.LINKS[0], comm.LINKS[-1]
    small, large = comm.stage1_tokens(1920, 1080), comm.stage1_tokens(3840, 2160)
    for p in comm.DEVICE_COUNTS:
        fast, slow = comm.row(large, p, nvlink, gpu), comm.row(large, p, host, gpu)
        assert 1 < slow.speedup < fast.speedup < p, (p, slow.speedup, fast.speedup)
        assert comm.row(small, p, host, gpu).speedup < slow.speedup
    assert comm.break_even_height(2, nvlink, gpu) <= comm.break_even_height(2, host, gpu)


def test_the_committed_page_is_what_the_script_prints():
    page = (comm.RESULTS / "sequence_comm.md").read_text()
    assert page == comm.page(), "bench/results/sequence_comm.md is stale: run python bench/sequence/comm.py --write"


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_the_paper_bytes_are_the_engines_own_formula(devices):
    """comm.py's table and the exchange (ltx/sequence/exchange.py) count the same bytes, at shards that divide."""
    from ltx_tdp.ltx.sequence.exchange import bytes_per_layer

    tokens, model = comm.stage1_tokens(3840, 2160), comm.LTX25
    engine = bytes_per_layer(tokens, tokens // devices, 1, model.bytes_per_value, (model.video_inner, model.audio_inner))
    assert comm.bytes_received_per_layer(tokens, devices) == engine, (comm.bytes_received_per_layer(tokens, devices), engine)
