"""Benchmark of the tiled VAE decode (not a test): time against PSNR and peak memory, ours at several
qualities against ComfyUI's VAEDecodeTiled at several settings, both against the untiled VAEDecode.

    COMFYUI_SRC=/path/to/ComfyUI-0.24.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/bench_vae_decode.py'

Everything runs in-process on a real ComfyUI (CPU, fp32):

* **real-config LTX-2**: ComfyUI's VideoVAE at LTX-2's published config (the `vae` entry of its checkpoints'
  metadata), random weights (PyTorch's default initialisation; see tests/ltx_tdp_devkit/real_vae.py), loaded by
  comfy.sd.VAE. The latent is 20 x 4 cells x 2 latent frames (640 x 128 px, 9 frames): a size this 2-core
  CPU decodes untiled in seconds, long enough across for a tile's context to stay inside the latent;
* **tiny**: the tests' tiny LTX VAE, for peak memory against the clip length (temporal chunks);
* **profile**: where a tiled decode's time goes (decoder calls vs crop/weights/blend/copies), and the
  decoded latent voxels against the latent's own for the presets at 3840 x 2176 x 121 (arithmetic).

Peak memory is the process's peak RSS above its RSS before the call (VmHWM reset through
/proc/self/clear_refs; glibc told to hand freed blocks of 64 KiB and more back at once), output included.
Results: bench/results/vae_decode.md and bench/results/vae_decode.png. About 5 minutes on 2 CPU cores. On
ComfyUI >= 0.32 it then runs bench/vae_decode_ltx25.py (LTX-2.5's diffusion decoder against VAEDecodeTiled
at the LTX-2.5 templates' settings; bench/results/vae_decode_ltx25.md and .png).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ltx_tdp_devkit import comfy_runtime, real_vae, tiny_models
from vae_decode_report import REAL_LATENT, RESULTS, plot, write_report

log = logging.getLogger("ltx_tdp.bench")

OUR_TILE = 320
"""Our spatial tile on the real-config runs: 10 cells, so the 20-cell row is two tiles."""

OURS = [("exact", 0), ("high", 0), ("balanced", 0), ("fast", 0), ("custom", 3), ("custom", 2), ("custom", 1),
        ("custom", 0)]
"""(quality, context_cells) of our runs at OUR_TILE, overlap 0, whole clips in time."""

COMFY_TILED = [(320, 64), (256, 64), (512, 128), (192, 32)]
"""VAEDecodeTiled (tile_size, overlap) runs (temporal_size 64, temporal_overlap 8: its defaults)."""

TINY_FRAMES = (13, 25, 49)
"""Tiny-VAE clip lengths in latent frames (97, 193, 385 frames of 256 x 256)."""

TINY_OURS = dict(spatial_tile=4096, spatial_overlap=0, temporal_tile=48, temporal_overlap=0, quality="custom",
                 context_cells=1)
"""Our memory-bounded setting: chunks of 6 latent frames with 1 of context, so every decoded block is at most
9 latent frames (65 frames) long whatever the clip (the 'exact' context, 5 for the tiny VAE, makes blocks of
up to 17 latent frames: flat only for clips longer than that)."""

TARGET_LATENT = (16, 68, 120)
"""3840 x 2176 x 121 frames: 2160 rounded up to whole 32 px latent cells."""


@dataclass(frozen=True)
class Row:
    case: str
    method: str
    setting: str
    seconds: float  # CPU seconds of this process (both torch threads): steadier than wall time on a shared machine
    wall: float
    peak: int
    output: int
    psnr: float


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def measure(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, tuple[float, float], int]:
    """(result, (CPU seconds, wall seconds), peak RSS above the RSS before the call in bytes)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    seconds = (time.process_time() - cpu, time.perf_counter() - start)
    return out, seconds, (_status_kib("VmHWM") - before) * 1024


def psnr(got: torch.Tensor, want: torch.Tensor) -> float:
    mse = torch.mean((got.double() - want.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def run(case: str, vae, x: torch.Tensor, want: torch.Tensor | None, method: str, setting: str, node, **inputs) -> Row:
    (got,), sec, peak = measure(lambda: comfy_runtime.run_node(node, vae=vae, samples={"samples": x}, **inputs))
    row = Row(case, method, setting, *sec, peak, got.numel() * got.element_size(),
              math.inf if want is None else psnr(got, want))
    log.info("%s | %s %s: %.2f CPU s, %.0f dB", case, method, setting, sec[0], row.psnr)
    return row


def real_rows(TiledVAEDecodeNode) -> tuple[list[Row], object]:
    vae = real_vae.real_vae(real_vae.LTX2_VAE_CONFIG, seed=0)
    x = torch.randn(1, 128, *REAL_LATENT, generator=torch.Generator().manual_seed(1))
    case = "real-config LTX-2"
    comfy_runtime.run_node("VAEDecode", vae=vae, samples={"samples": x[..., :2, :2]})  # warm up
    (want,), sec, peak = measure(lambda: comfy_runtime.run_node("VAEDecode", vae=vae, samples={"samples": x}))
    rows = [Row(case, "VAEDecode", "untiled", *sec, peak, want.numel() * 4, math.inf)]
    rows.append(run(case, vae, x, want, "ours", "node defaults (exact, 2048 px)", TiledVAEDecodeNode))
    for quality, cells in OURS:
        label = f"{quality}" + (f" {cells}" if quality == "custom" else "") + f", {OUR_TILE} px"
        rows.append(run(case, vae, x, want, "ours", label, TiledVAEDecodeNode, spatial_tile=OUR_TILE,
                        quality=quality, context_cells=cells))
    for tile, overlap in COMFY_TILED:
        rows.append(run(case, vae, x, want, "VAEDecodeTiled", f"{tile} px / {overlap}", "VAEDecodeTiled",
                        tile_size=tile, overlap=overlap, temporal_size=64, temporal_overlap=8))
    return rows, vae


def tiny_rows(TiledVAEDecodeNode, base: Path) -> list[Row]:
    import comfy.sd
    import comfy.utils

    sd, meta = comfy.utils.load_torch_file(str(tiny_models.build_vae(base / "vae.safetensors")), return_metadata=True)
    vae = comfy.sd.VAE(sd=sd, metadata=meta)
    rows = []
    comfy_runtime.run_node(TiledVAEDecodeNode, vae=vae, samples={"samples": torch.zeros(1, 128, 2, 2, 2)}, **TINY_OURS)
    for frames in TINY_FRAMES:
        x = torch.randn(1, 128, frames, 8, 8, generator=torch.Generator().manual_seed(frames))
        case = f"tiny, 256x256x{8 * frames - 7}"
        (want,), sec, peak = measure(lambda: comfy_runtime.run_node("VAEDecode", vae=vae, samples={"samples": x}))
        rows.append(Row(case, "VAEDecode", "untiled", *sec, peak, want.numel() * 4, math.inf))
        rows.append(run(case, vae, x, want, "ours", "custom 1, chunks of 48 frames", TiledVAEDecodeNode, **TINY_OURS))
        rows.append(run(case, vae, x, want, "VAEDecodeTiled", "256 px, 48 / 8 frames", "VAEDecodeTiled",
                        tile_size=256, overlap=64, temporal_size=48, temporal_overlap=8))
        del want
    return rows


def profile(vae) -> list[str]:
    """Where the time of one tiled decode goes: decoder calls vs everything else (crop, weights, blend, copies)."""
    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.tiling import blend_tiles

    x = torch.randn(1, 128, *REAL_LATENT, generator=torch.Generator().manual_seed(1))
    lines = []
    for quality in ("exact", "balanced"):
        job = prepare_decode(vae, x, DecodeSettings(spatial_tile=OUR_TILE, quality=quality))
        spatial = job.context[1]
        decode_s = 0.0

        def timed(tile):
            nonlocal decode_s
            start = time.perf_counter()
            out = job.decode_tile(tile)
            decode_s += time.perf_counter() - start
            return out

        start = time.perf_counter()
        with torch.inference_mode():
            images = torch.zeros(job.output_shape, dtype=torch.float32)
            blend_tiles(job.plan.pixels, timed, out=images.permute(0, 4, 1, 2, 3))
        total = time.perf_counter() - start
        decoded = sum(math.prod(job.plan.source(t).latent_shape) for t in job.plan.pixels.tiles)
        lines.append(f"| {quality} (context {spatial}) | {total:.2f} | {decode_s:.2f} | {total - decode_s:.2f} | "
                     f"{decoded / math.prod(REAL_LATENT):.2f} |")
    return lines


def overhead_4k(vae) -> list[str]:
    """Decoded latent voxels / latent voxels at 3840 x 2176 x 121 for each preset and spatial tile (whole clips)."""
    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.ltx.vae.inputs import vae_geometry
    from ltx_tdp.ltx.vae.decoder import decode_context
    from ltx_tdp.ltx.vae.settings import QUALITY_PRESETS
    from ltx_tdp.tiling.decode_plan import plan_decode

    geometry = vae_geometry(vae)
    presets = [p.name for p in QUALITY_PRESETS if p.name != "custom"]
    lines = ["| spatial tile | tiles | " + " | ".join(presets) + " |", "|---:|---:|" + "---:|" * len(presets)]
    for tile in (768, 1024, 1536, 2048, 4096):
        cells = []
        for name in presets:
            settings = DecodeSettings(spatial_tile=tile, quality=name)
            time, space = decode_context(vae, settings)
            plan = plan_decode(TARGET_LATENT, settings.tile_sizes(), (time, space, space), geometry)
            decoded = sum(math.prod(plan.source(t).latent_shape) for t in plan.pixels.tiles)
            cells.append(f"{decoded / math.prod(TARGET_LATENT):.2f}x")
        lines.append(f"| {tile} px | {' x '.join(map(str, plan.pixels.counts[1:]))} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: RSS follows live memory
    base = Path(tempfile.mkdtemp(prefix="tdp_bench_vae_"))
    comfy_runtime.start_script(base)
    comfy_runtime.quiet()
    log.setLevel(logging.INFO)  # quiet() raises the root logger's level; this script's progress still shows
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    if not real_vae.builds_ltx2_vae():
        sys.exit("this ComfyUI cannot build the LTX-2 VAE: run with COMFYUI_SRC pointing at ComfyUI >= 0.8")
    with torch.inference_mode():
        rows, vae = real_rows(TiledVAEDecodeNode)
        profile_lines = profile(vae)
        overhead_lines = overhead_4k(vae)
        del vae
        gc.collect()
        rows += tiny_rows(TiledVAEDecodeNode, base)
    plot(rows, RESULTS / "vae_decode.png")
    write_report(rows, profile_lines, overhead_lines, comfy_runtime.comfyui_version())
    from ltx_tdp_devkit.diffusion_vae import has_diffusion_vae

    if has_diffusion_vae():  # LTX-2.5's diffusion decoder (ComfyUI >= 0.32): its own report and plot
        import vae_decode_ltx25

        vae_decode_ltx25.run_all()


if __name__ == "__main__":
    main()
