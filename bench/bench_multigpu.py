"""Benchmark of the multi-GPU group (not a test): one TDP model call with 4 tiles on 1 rank vs 2 ranks.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_multigpu.py'

On this 2-core CPU machine every rank gets one torch thread (rank 0 here, the worker via its --threads),
so the ranks do not fight over the cores, and the 1-rank baseline also runs on one thread. Ranks talk over
gloo on loopback, through the real launcher path: subprocess workers, the model replica's broadcast, then
per call the job's input broadcast, the store acks and one all_reduce. A model call is one `apply_model` through ComfyUI's wrapper chain, on a wider tiny
LTXVModel (BENCH_MODEL) at a size where compute dominates.

Reported: time per call (median), the speedup, the time rank 0 spends per phase (send inputs, its own
tiles, waiting for the workers, all_reduce), the share of communication, and a paper estimate for 4 and 8
ranks from the measured per-tile compute and the all_reduce size. Results: bench/results/multigpu.md.
Environment: TDP_BENCH_CALLS (timed calls per setting, default 5).
"""

from __future__ import annotations

import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
from ltx_tdp_devkit import comfy_runtime, tiny_models

log = logging.getLogger("ltx_tdp.bench")

BENCH_MODEL = dict(num_layers=2, num_attention_heads=4, attention_head_dim=32, cross_attention_dim=128)
LATENT = (4, 40, 40)  # frames, height, width (latent cells): 1280 x 1280 px x 25 frames
TILES, OVERLAP = (2, 2), 4
SIGMA, CONTEXT_TOKENS, CONTEXT_DIM = 0.6, 8, 16
ASSUMED_LINKS = {"PCIe 4.0 x16 (~20 GB/s bus bw)": 20e9, "NVLink 4 (~300 GB/s bus bw)": 300e9}
"""Interconnect bandwidths assumed for the GPU rows of the paper estimate (not measured here)."""


def _setup():
    base = Path(tempfile.mkdtemp(prefix="ltx-tdp-bench-mgpu."))
    comfy_runtime.start_script(base)
    tiny_models.build_ltxv(base / "models" / "diffusion_models" / "bench_ltxv.safetensors", **BENCH_MODEL)
    import folder_paths

    folder_paths.filename_list_cache.clear()
    (model,) = comfy_runtime.run_node("UNETLoader", unet_name="bench_ltxv.safetensors", weight_dtype="default")
    return model


def _tiling():
    from ltx_tdp.tiling import AxisTiling, TileCountConfig

    return TileCountConfig(height=AxisTiling(TILES[0], OVERLAP), width=AxisTiling(TILES[1], OVERLAP))


def _caller(patcher):
    import comfy.model_management

    gen = torch.Generator().manual_seed(7)
    ctx = torch.randn(1, CONTEXT_TOKENS, CONTEXT_DIM, generator=gen)
    mask = torch.ones(1, CONTEXT_TOKENS, dtype=torch.long)
    comfy.model_management.load_models_gpu([patcher])

    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return patcher.model.apply_model(x, torch.full((x.shape[0],), SIGMA), c_crossattn=ctx, attention_mask=mask,
                                             frame_rate=25.0, transformer_options={"wrappers": patcher.wrappers})

    return call


def _timed(call, x: torch.Tensor, n: int) -> tuple[list[float], torch.Tensor]:
    out, times = call(x), []  # warm-up (and, for the group: start, NEW_MODEL)
    for _ in range(n):
        start = time.perf_counter()
        out = call(x)
        times.append(time.perf_counter() - start)
    return times, out


def _tokens_per_tile(n: int) -> int:
    """Tokens of the largest tile when LATENT is split into n tiles (balanced split, same overlap)."""
    from ltx_tdp.tiling import AxisTiling, balanced_split

    f, h, w = LATENT
    th, tw = balanced_split(n, h, w)
    lh = max(i.length for i in AxisTiling(th, OVERLAP if th > 1 else 0).intervals(h))
    lw = max(i.length for i in AxisTiling(tw, OVERLAP if tw > 1 else 0).intervals(w))
    return f * lh * lw


def _estimate(per_token_s: float, bandwidth: float, latency_s: float, reduce_bytes: int, send_bytes: int) -> list[dict]:
    """Paper estimate per rank count n, one tile per rank (balanced split of the same latent).

    1 rank: n tiles one after another. n ranks: one tile + broadcast of the inputs (tree: log2 n hops) +
    ring all_reduce (2 (n-1)/n of the buffer per rank) at the measured bandwidth and latency.
    """
    rows = []
    for n in (2, 4, 8):
        tile = per_token_s * _tokens_per_tile(n)
        comm = (math.ceil(math.log2(n)) * (send_bytes / bandwidth + latency_s)
                + 2 * (n - 1) / n * reduce_bytes / bandwidth + 2 * (n - 1) * latency_s)
        rows.append({"n": n, "tile": tile, "one_rank": n * tile, "n_ranks": tile + comm, "comm": comm})
    return rows


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    calls = int(os.environ.get("TDP_BENCH_CALLS", "7"))
    begin, load_before = time.perf_counter(), os.getloadavg()[0]
    model = _setup()
    comfy_runtime.quiet()
    from ltx_tdp.ltx.model import apply_tdp
    from ltx_tdp.multigpu.group import get_group, shutdown_all
    from ltx_tdp.multigpu.settings import GroupSettings

    x = torch.randn(1, 128, *LATENT, generator=torch.Generator().manual_seed(3))
    single_times, single_out = _timed(_caller(apply_tdp(model, _tiling())), x, calls)
    group = get_group(GroupSettings(devices=("cpu", "cpu"), backend="gloo", timeout_s=120, threads=1))
    try:
        multi_call = _caller(apply_tdp(model, _tiling(), group=group))
        multi_call(x)
        group.session().stats.clear()
        multi_times, multi_out = _timed(multi_call, x, calls)
        stats = dict(group.session().stats)
    finally:
        shutdown_all()
    err = (multi_out - single_out).abs().max().item()
    n = stats["jobs"]
    phase = {k: stats.get(k, 0.0) / n for k in ("send", "tiles", "wait", "reduce")}
    reduce_bytes, send_bytes = stats["reduce_bytes"] / n, stats["send_bytes"] / n
    t1, t2 = statistics.median(single_times), statistics.median(multi_times)
    best = (min(single_times), min(multi_times))
    per_tile = t1 / (TILES[0] * TILES[1])
    per_token = per_tile / _tokens_per_tile(TILES[0] * TILES[1])
    measured_bw = reduce_bytes / max(phase["reduce"], 1e-9)  # 2 ranks: each sends and receives the buffer once
    load = (load_before, os.getloadavg()[0])
    text = _markdown(t1, t2, best, phase, reduce_bytes, send_bytes, per_tile, per_token, measured_bw, err, calls,
                     time.perf_counter() - begin, load)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "multigpu.md").write_text(text)
    print(text)
    return 0


def _markdown(t1, t2, best, phase, reduce_bytes, send_bytes, per_tile, per_token, bw, err, calls, seconds, load) -> str:
    import comfyui_version

    comm = phase["send"] + phase["reduce"]
    f, h, w = LATENT
    lines = [
        "# Multi-GPU group benchmark",
        "",
        f"`bench/bench_multigpu.py` on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"ComfyUI {comfyui_version.__version__}, CPU, fp32, gloo on loopback, **1 torch thread per rank** (the "
        f"1-rank baseline too). Model: LTXVModel built with ComfyUI's class, {BENCH_MODEL['num_layers']} layers, "
        f"{BENCH_MODEL['num_attention_heads']} heads x {BENCH_MODEL['attention_head_dim']}. One call = one "
        f"`apply_model` through ComfyUI's wrapper chain on a {f}x{h}x{w} latent ({w * 32}x{h * 32} px x "
        f"{(f - 1) * 8 + 1} frames), {TILES[0]}x{TILES[1]} tiles, overlap {OVERLAP}; median and best of {calls} "
        f"calls. Total run time {seconds:.0f} s; 1-minute load average {load[0]:.2f} before, {load[1]:.2f} after "
        f"(anything above ~0.3 means other processes shared the 2 cores and the speedup is understated).",
        "",
        "| ranks | ms per call (median) | ms per call (best) | speedup (median) | speedup (best) | max abs diff vs 1 rank |",
        "|---|---|---|---|---|---|",
        f"| 1 | {t1 * 1e3:.0f} | {best[0] * 1e3:.0f} | 1.00 | 1.00 | |",
        f"| 2 | {t2 * 1e3:.0f} | {best[1] * 1e3:.0f} | {t1 / t2:.2f} | {best[0] / best[1]:.2f} | {err:.1e} |",
        "",
        "Rank 0's time per call with 2 ranks (mean):",
        "",
        "| send inputs (broadcast) | own tiles | wait for the worker's ack | all_reduce | communication share |",
        "|---|---|---|---|---|",
        f"| {phase['send'] * 1e3:.1f} ms ({send_bytes / 2**20:.2f} MiB) | {phase['tiles'] * 1e3:.0f} ms | "
        f"{phase['wait'] * 1e3:.1f} ms | {phase['reduce'] * 1e3:.1f} ms ({reduce_bytes / 2**20:.2f} MiB fp32) | "
        f"{comm / t2 * 100:.1f} % |",
        "",
        "Waiting is load imbalance plus the worker's own overhead (message pickup, unpacking), not transfer.",
        "",
        "## Paper estimate",
        "",
        f"From the measured per-tile compute ({per_tile * 1e3:.0f} ms for a {_tokens_per_tile(4)}-token tile, i.e. "
        f"{per_token * 1e6:.1f} us per token, assumed linear in tokens) and the all_reduce size, with one tile per "
        f"rank (balanced split of the same latent), input broadcast over log2(n) hops and a ring all_reduce "
        f"moving 2(n-1)/n of the {reduce_bytes / 2**20:.2f} MiB buffer. Communication at this machine's measured "
        f"gloo loopback rate ({bw / 1e9:.2f} GB/s, 0.1 ms per message):",
        "",
        "| ranks | tile (ms) | 1 rank, all tiles (ms) | n ranks (ms) | of which communication (ms) | speedup |",
        "|---|---|---|---|---|---|",
    ]
    for r in _estimate(per_token, bw, 1e-4, reduce_bytes, send_bytes):
        lines.append(f"| {r['n']} | {r['tile'] * 1e3:.0f} | {r['one_rank'] * 1e3:.0f} | {r['n_ranks'] * 1e3:.0f} | "
                     f"{r['comm'] * 1e3:.1f} | {r['one_rank'] / r['n_ranks']:.2f} |")
    big = 128 * 16 * 68 * 120 * 4  # a 3840x2160x121 LTX latent in fp32
    lines += [
        "",
        f"GPU interconnects (assumed, not measured), for a 4K stage-2 call (latent 128 x 16 x 68 x 120, "
        f"{big / 2**20:.0f} MiB fp32 all_reduce, the same sent as input):",
        "",
        "| link | 4 GPUs: communication per call (ms) | 8 GPUs: communication per call (ms) |",
        "|---|---|---|",
    ]
    for name, link in ASSUMED_LINKS.items():
        cost = [math.ceil(math.log2(n)) * big / link + 2 * (n - 1) / n * big / link for n in (4, 8)]
        lines.append(f"| {name} | {cost[0] * 1e3:.1f} | {cost[1] * 1e3:.1f} |")
    lines += [
        "",
        "A 4K tile of a 19B LTX-2 takes seconds per model call on one GPU, so communication stays below a few "
        "per cent even over PCIe; the speedup is set by how evenly the tiles split (one tile per GPU) and by the "
        "overlap each tile recomputes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
