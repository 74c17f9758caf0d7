"""The in-process exchange of LTX Sequence Parallel timed on the CPU (not a test): one layer's all-gather at 1080p.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/sequence/exchange_cpu.py'

Two threads (one per device, one torch thread each) call the pack's own `AllGather.gather` (ltx/sequence/exchange.py)
with what LTX-2.5's stage 1 hands it per layer at 1080p on 2 devices (bench/sequence/comm.py's sizes): each
holds N/2 = 4080 of the 8160 video tokens and gathers keys and values of the video self-attention (4096 wide) and of
`video_to_audio_attn` (2048 wide), bf16. On one CPU the "devices" share memory, so this measures the exchange's own
cost (barrier, copies, concatenation), not a link: what a GPU machine adds is comm.py's link time. Writes
bench/results/sequence_exchange_cpu.md. Environment: TDP_BENCH_RUNS (timed gathers, default 10).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"
SHARD, WIDTHS = 4080, (4096, 2048)
"""Tokens per device at 1080p on 2 devices and the key/value widths of the two attentions over video keys."""


def time_layer(runs: int, shard: int = SHARD, widths: tuple[int, ...] = WIDTHS) -> tuple[list[float], int]:
    """Seconds per layer's gathers (both attentions, keys and values) on 2 threads, `runs` times after a warm-up,
    and the bytes one device received per layer."""
    from ltx_tdp.ltx.sequence.exchange import AllGather

    gen = torch.Generator().manual_seed(0)
    parts = [[torch.randn(1, shard, w, generator=gen).to(torch.bfloat16) for w in widths for _ in "kv"]
             for _ in range(2)]
    exchange, times = AllGather(2), []

    def layer(rank: int) -> None:
        for i in range(0, len(parts[rank]), 2):
            exchange.gather(rank, parts[rank][i:i + 2], dim=1)

    def other() -> None:
        torch.set_num_threads(1)
        for _ in range(runs + 1):
            layer(1)

    worker = threading.Thread(target=other, name="device 1")
    worker.start()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(runs + 1):
            start = time.perf_counter()
            layer(0)
            if i:
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
        worker.join()
    return times, exchange.bytes_received[0] // (runs + 1)


def main() -> int:
    from ltx_tdp_devkit.pack import import_pack

    import_pack()
    runs = int(os.environ.get("TDP_BENCH_RUNS", "10"))
    load = os.getloadavg()
    times, received = time_layer(runs)
    med = statistics.median(times)
    text = "\n".join([
        "# LTX Sequence Parallel: the in-process exchange on the CPU", "",
        f"`bench/sequence/exchange_cpu.py`, torch {torch.__version__}, {os.cpu_count()} cores, load average "
        f"{load[0]:.2f}: one layer's all-gathers of LTX-2.5's stage 1 at 1080p on 2 devices (2 threads, the "
        f"pack's `AllGather`), {SHARD} tokens a device, keys and values {' and '.join(map(str, WIDTHS))} wide, bf16; "
        f"median and best of {runs}.", "",
        "| bytes received per device per layer | ms per layer (median) | ms (best) | GB/s (median) | per step, 48 layers |",
        "|---|---|---|---|---|",
        f"| {received / 1e6:.1f} MB | {med * 1e3:.1f} | {min(times) * 1e3:.1f} | {received / med / 1e9:.1f} | "
        f"{med * 48 * 1e3:.0f} ms |", ""])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sequence_exchange_cpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
