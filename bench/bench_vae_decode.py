"""Benchmark of the tiled VAE decode (not a test): peak memory and time against ComfyUI's VAEDecode and
VAEDecodeTiled at growing sizes, and a projected peak for the real LTX-2 VAE at 3840 x 2160 x 121.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_vae_decode.py'

All three run in-process on a real ComfyUI (CPU) with the tiny LTX VAE of the tests (ComfyUI's own
VideoVAE; on ComfyUI 0.3.x its decoder is 128 channels wide at every stage, as the last, largest stage of
the real LTX decoders is). Peak memory is the process's peak RSS above its RSS before the call (VmHWM
reset through /proc/self/clear_refs; glibc told to hand freed blocks of 64 KiB and more back at once), so
it counts the output as well as the working memory. PSNR is against VAEDecode. Results go to
bench/results/vae_decode.md. About 2-3 minutes on 2 CPU cores. TDP_BENCH_QUICK=1 runs the two small sizes.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO / "tests"))

from support import comfy_runtime, tiny_models  # noqa: E402
from support.pack_import import import_pack  # noqa: E402
from support.paths import comfyui_dir  # noqa: E402

log = logging.getLogger("ltx_tdp.bench")

SIZES = [(4, 4, 4), (7, 8, 8), (13, 8, 8)]
"""Latent (frames, height, width): 128 x 128 x 25, 256 x 256 x 49 and 256 x 256 x 97 pixels."""

OURS = dict(spatial_tile=192, spatial_overlap=32, temporal_tile=32, temporal_overlap=8)
COMFY_TILED = dict(tile_size=192, overlap=32, temporal_size=32, temporal_overlap=8)
"""The same tile sizes for both tiled decodes (VAEDecodeTiled turns them into 6 x 6 latent cells, overlap 1,
and 4 latent frames, overlap 1)."""

TARGET_LATENT = (16, 68, 120)
"""3840 x 2176 x 121 frames: 2160 rounded up to whole 32 px latent cells."""

TARGET_SETTINGS = dict(spatial_tile=768, spatial_overlap=64, temporal_tile=80, temporal_overlap=24)
"""The node's defaults (upstream LTX-2's 4K decode settings)."""


@dataclass(frozen=True)
class Row:
    size: str
    method: str
    seconds: float
    peak: int
    output: int
    psnr: float
    voxels: int  # decoded pixel voxels (frames x height x width) of the largest single decode call


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def measure(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, float, int]:
    """(result, seconds, peak RSS above the RSS before the call in bytes)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    return out, seconds, (_status_kib("VmHWM") - before) * 1024


def psnr(got: torch.Tensor, want: torch.Tensor) -> float:
    mse = torch.mean((got.double() - want.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    comfy_dir = comfyui_dir()
    if comfy_dir is None:
        sys.exit("set COMFYUI_DIR or source scripts/env.sh first")
    ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: RSS follows live memory
    base = Path(tempfile.mkdtemp(prefix="tdp_bench_vae_"))
    comfy_runtime.start(comfy_dir, base)
    comfy_runtime.quiet()
    import_pack()
    import comfy.sd
    import comfy.utils

    from ltx_tdp.ltx.vae_decode import decoder_reach, plan_decode, vae_scales
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    sd, meta = comfy.utils.load_torch_file(str(tiny_models.build_vae(base / "vae.safetensors")), return_metadata=True)
    vae = comfy.sd.VAE(sd=sd, metadata=meta)
    scales = vae_scales(vae)
    sizes = SIZES[:2] if os.environ.get("TDP_BENCH_QUICK") else SIZES
    rows: list[Row] = []
    with torch.inference_mode():
        comfy_runtime.run_node(TiledVAEDecodeNode, vae=vae, samples={"samples": torch.zeros(1, 128, 2, 2, 2)}, **OURS)
        for frames, height, width in sizes:
            x = {"samples": torch.randn(1, 128, frames, height, width, generator=torch.Generator().manual_seed(frames))}
            pixels = tuple(s.pixel_length(n) for s, n in zip(scales, (frames, height, width)))
            label = f"{pixels[2]}x{pixels[1]}x{pixels[0]}"
            full_voxels = math.prod(pixels)
            (want,), sec, peak = measure(lambda: comfy_runtime.run_node("VAEDecode", vae=vae, samples=x))
            rows.append(Row(label, "VAEDecode", sec, peak, want.numel() * 4, math.inf, full_voxels))
            (got,), sec, peak = measure(lambda: comfy_runtime.run_node("VAEDecodeTiled", vae=vae, samples=x, **COMFY_TILED))
            rows.append(Row(label, "VAEDecodeTiled", sec, peak, got.numel() * 4, psnr(got, want), 0))
            del got
            (got,), sec, peak = measure(lambda: comfy_runtime.run_node(TiledVAEDecodeNode, vae=vae, samples=x, **OURS))
            block = plan_decode((frames, height, width), scales, OURS["spatial_tile"], OURS["spatial_overlap"],
                                OURS["temporal_tile"], OURS["temporal_overlap"]).largest_source()
            voxels = math.prod(s.pixel_length(n) for s, n in zip(scales, block))
            rows.append(Row(label, "LTX TDP Tiled VAE Decode", sec, peak, got.numel() * 4, psnr(got, want), voxels))
            del got, want
            log.info("%s done", label)

    # Working memory per decoded voxel (fp32, CPU), from our largest size: peak minus the output buffer.
    ours = [r for r in rows if r.method.startswith("LTX")][-1]
    untiled = [r for r in rows if r.method == "VAEDecode"][-1]
    per_voxel_tile = (ours.peak - ours.output) / ours.voxels
    per_voxel_full = (untiled.peak - untiled.output) / untiled.voxels
    target = plan_decode(TARGET_LATENT, scales, **TARGET_SETTINGS)
    target_block = target.largest_source()
    target_tile_voxels = math.prod(s.pixel_length(n) for s, n in zip(scales, target_block))
    target_voxels = math.prod(target.pixel_shape)
    bf16 = 0.5
    reach = decoder_reach(vae)
    write_report(rows, per_voxel_tile, per_voxel_full, target, target_block, target_tile_voxels, target_voxels, bf16,
                 reach, comfy_runtime.comfyui_version(), vae)


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:,.1f}"


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


def write_report(rows, per_voxel_tile, per_voxel_full, target, target_block, target_tile_voxels, target_voxels, bf16,
                 reach, version, vae) -> None:
    lines = [
        "# Tiled VAE decode: peak memory and time",
        "",
        f"ComfyUI {version}, torch {torch.__version__}, CPU ({platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} threads), tiny LTX VAE of the tests (fp32). Produced by "
        "`bench/bench_vae_decode.py`.",
        "",
        f"Tiles: ours {OURS['spatial_tile']} px / {OURS['spatial_overlap']} px overlap, {OURS['temporal_tile']} "
        f"frames / {OURS['temporal_overlap']} overlap, context 1 latent cell; VAEDecodeTiled the same sizes "
        f"(tile_size {COMFY_TILED['tile_size']}, overlap {COMFY_TILED['overlap']}, temporal_size "
        f"{COMFY_TILED['temporal_size']}, temporal_overlap {COMFY_TILED['temporal_overlap']}). Peak = peak RSS "
        "above the RSS before the call (output included). PSNR against VAEDecode: the tiny VAE has random "
        "weights, and its decoder reaches "
        f"{reach[1]:.1f} latent cells (~{reach[1] * 32:.0f} px) around each cell, so tiles with one cell of "
        "context differ from the untiled decode near their borders far more than a trained VAE's would; "
        "with context >= the reach they match it (tests/comfy/test_tiled_vae_decode.py).",
        "",
        "| size (W x H x frames) | method | time (s) | peak (MiB) | output (MiB) | peak - output (MiB) | PSNR vs VAEDecode (dB) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        q = "—" if math.isinf(r.psnr) and r.method == "VAEDecode" else ("inf" if math.isinf(r.psnr) else f"{r.psnr:.1f}")
        lines.append(f"| {r.size} | {r.method} | {r.seconds:.2f} | {mib(r.peak)} | {mib(r.output)} | "
                     f"{mib(r.peak - r.output)} | {q} |")
    out_bytes = target_voxels * 3 * 4
    tile_gpu = target_tile_voxels * per_voxel_tile * bf16
    full_gpu = target_voxels * per_voxel_full * bf16
    comfy_tile = vae.memory_used_decode((1, 128, *target_block), torch.bfloat16)
    comfy_full = vae.memory_used_decode((1, 128, *TARGET_LATENT), torch.bfloat16)
    f, h, w = target.pixel_shape
    lines += [
        "",
        f"## Projection: real LTX-2 VAE, {w} x {h} x {f} frames (bf16 on a GPU)",
        "",
        f"Settings: the node's defaults ({TARGET_SETTINGS['spatial_tile']} px / {TARGET_SETTINGS['spatial_overlap']} "
        f"px, {TARGET_SETTINGS['temporal_tile']} / {TARGET_SETTINGS['temporal_overlap']} frames, context 1): "
        f"{' x '.join(map(str, target.pixels.counts))} tiles (frames x height x width); the largest tile decodes "
        f"a latent block of {' x '.join(map(str, target_block))} = "
        f"{target_tile_voxels / 1e6:,.1f} M pixel voxels, the whole clip {target_voxels / 1e6:,.0f} M.",
        "",
        "| | working memory per decoded voxel | one tile (GPU) | untiled (GPU) | output (CPU, fp32) |",
        "|---|---:|---:|---:|---:|",
        f"| from the measured tiny-VAE figures | {per_voxel_tile:.0f} B tiled / {per_voxel_full:.0f} B untiled (fp32) | "
        f"{gib(tile_gpu)} GiB | {gib(full_gpu)} GiB | {gib(out_bytes)} GiB |",
        f"| ComfyUI's own estimate (`VAE.memory_used_decode`, bf16) | — | {gib(comfy_tile)} GiB | {gib(comfy_full)} GiB | "
        f"{gib(out_bytes)} GiB |",
        "",
        "Assumptions: (1) the peak of a decode is set by its last, full-resolution stage, where the real LTX "
        "decoders are 128 channels wide like the tiny one on ComfyUI 0.3.x (earlier stages have 2-8x the "
        "channels at 1/8-1/64 of the voxels, and depth does not add to the peak of an inference pass); (2) "
        "bf16 halves the fp32 bytes measured here; (3) the real decoder's residual upsamplers add one more "
        "tensor the size of a stage's output, not counted: read the first row as a lower bound and "
        "ComfyUI's estimate as its own, more conservative figure; (4) VAE weights, the CUDA context and "
        "the allocator's cache come on top; (5) the output stays in system memory (the GPU only ever holds "
        "one tile). VAEDecode on ComfyUI >= 0.8 streams time inside the decoder and needs less than the "
        "untiled column; its output still lands in one piece.",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "vae_decode.md"
    path.write_text("\n".join(lines))
    log.info("wrote %s\n%s", path, "\n".join(lines))


if __name__ == "__main__":
    main()
