"""The all-gather between device threads: every rank gets every rank's parts in rank order, over many rounds;
an abort releases every waiting rank with ExchangeAborted, which DeviceRanks counts as stopped."""

from __future__ import annotations

import threading

import torch


def _run(ranks: int, body) -> list:
    out: list = [None] * ranks
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(r, body(r))) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting"
    return out


def test_every_rank_gets_every_part_in_rank_order_every_round():
    from ltx_tdp.ltx.sequence.exchange import AllGather

    ranks, rounds = 3, 20
    exchange = AllGather(ranks)

    def body(rank: int) -> list:
        got = []
        for i in range(rounds):
            k = torch.full((1, rank + 1, 2), float(100 * i + rank))
            got.append(exchange.gather(rank, (k, -k), 1))
        return got

    results = _run(ranks, body)
    for i in range(rounds):
        want = torch.cat([torch.full((1, r + 1, 2), float(100 * i + r)) for r in range(ranks)], dim=1)
        for rank in range(ranks):
            k, v = results[rank][i]
            assert torch.equal(k, want) and torch.equal(v, -want), (i, rank)
    assert exchange.bytes_received[0] == rounds * 2 * (2 + 3) * 2 * 4, exchange.bytes_received


def test_an_abort_releases_the_waiting_ranks_as_stopped():
    from ltx_tdp.ltx.device_ranks import Stopped
    from ltx_tdp.ltx.sequence.exchange import AllGather, ExchangeAborted

    exchange = AllGather(3)

    def body(rank: int):
        if rank == 2:
            exchange.abort()  # as a failing rank does before it raises
            return "failed"
        try:
            exchange.gather(rank, (torch.zeros(1, 1, 1),), 1)
        except ExchangeAborted as e:
            return e
        return "gathered"

    out = _run(3, body)
    assert isinstance(out[0], Stopped) and isinstance(out[1], Stopped), out


def test_a_rank_that_leaves_without_a_gather_the_others_wait_for_releases_them_with_the_cause():
    """A rank whose model call returned early (it skipped the blocks, so never joins gather 2) leaves the exchange:
    the ranks waiting for gather 2, now or later, raise ExchangeDeserted (an error, not a stop) at once."""
    from ltx_tdp.ltx.device_ranks import Stopped
    from ltx_tdp.ltx.sequence.exchange import AllGather, ExchangeDeserted

    exchange = AllGather(3)
    first_done = threading.Barrier(3)

    def body(rank: int):
        exchange.gather(rank, (torch.zeros(1, 1, 1),), 1)
        first_done.wait(timeout=30)
        if rank == 2:
            exchange.leave(rank)  # returned after 1 gather
            return "left"
        try:
            exchange.gather(rank, (torch.zeros(1, 1, 1),), 1)
        except ExchangeDeserted as e:
            return e
        return "gathered"

    out = _run(3, body)
    assert out[2] == "left"
    for rank in (0, 1):
        assert isinstance(out[rank], ExchangeDeserted) and not isinstance(out[rank], Stopped), out
        assert "rank 2" in str(out[rank]) and "skipped the transformer blocks" in str(out[rank]), out[rank]


def test_a_rank_leaving_before_the_others_arrive_releases_them_when_they_arrive():
    from ltx_tdp.ltx.sequence.exchange import AllGather, ExchangeDeserted

    exchange = AllGather(2)
    exchange.leave(1)  # rank 1's model call returned without any gather
    try:
        exchange.gather(0, (torch.zeros(1, 1, 1),), 1)
    except ExchangeDeserted as e:
        assert "after 0 of its exchanges" in str(e), e
    else:
        raise AssertionError("rank 0 gathered with a rank that had left")


def test_ranks_that_all_leave_after_every_gather_raise_nothing():
    """The normal end of a call: every rank joins every gather, then leaves; nobody is released with an error,
    whatever the order in which they leave."""
    from ltx_tdp.ltx.sequence.exchange import AllGather

    for _ in range(50):
        exchange = AllGather(3)

        def body(rank: int):
            for _ in range(4):
                exchange.gather(rank, (torch.zeros(1, 1, 1),), 1)
            exchange.leave(rank)
            return "ok"

        assert _run(3, body) == ["ok"] * 3
