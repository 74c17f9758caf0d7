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
