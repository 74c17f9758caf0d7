"""The real size: LTX-2 19B stage-2 model calls at 4K (tiled and untiled) and the LTX-2 VAE decode at 4K.

Each step builds its model itself (random weights, nothing downloaded), warms the kernels up on a small
input, and records each measurement as soon as it is taken, so a step stopped by its time limit keeps
what it measured. Times are wall-clock seconds between CUDA synchronisations; peaks are
`torch.cuda.max_memory_allocated` over the call (weights included).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import torch

from models import build_ltx2_transformer, build_vae, call_inputs, model_call, tdp
from runtime import Records, attention_name, device, measure
from sizes import Layout, Sizes, decode_settings


class RankShare:
    """A stand-in multi-GPU group for the patcher's `tdp_group`, whose ranks (`tiling.ranks.TileRanks`) make this
    process rank `rank` of `world` with nobody else running: it computes only the tiles that rank owns
    (round-robin) and does no all_reduce. Its time is the compute one GPU of such a group does per model call."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world, self.tiles = rank, world, 0

    def ranks(self, kind: str, source: Any) -> "RankShare":
        return self

    def reduce(self, job: Any, partial: Any) -> torch.Tensor:
        self.tiles = 0

        def count(tile: Any) -> None:
            self.tiles += 1

        return partial(self.rank, self.world, count)


def _dtype() -> torch.dtype:
    return torch.bfloat16 if device().type == "cuda" else torch.float32


def _oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _build(rec: Records, sizes: Sizes) -> tuple[Any, Any]:
    (patcher, facts), seconds, peak = measure(lambda: build_ltx2_transformer(sizes.transformer, _dtype()))
    rec.add("build LTX-2 transformer", "ok", seconds=seconds, peak_gib=peak, attention=attention_name(),
            video_latent=list(sizes.video_latent), audio_latents=sizes.audio_latents, text_tokens=sizes.text_tokens,
            sigma=sizes.sigma, **facts)
    inputs = call_inputs(patcher, sizes.video_latent, sizes.audio_latents, sizes.text_tokens, seed=7)
    warm = call_inputs(patcher, sizes.warmup_latent, 5, sizes.text_tokens, seed=8)
    _, seconds, _ = measure(lambda: model_call(patcher, warm, sizes.sigma))
    rec.add("warm-up call", "ok", seconds=seconds, latent=list(sizes.warmup_latent))
    return patcher, inputs


def _tokens(layout_tile: tuple[int, ...]) -> int:
    return math.prod(layout_tile)


def _tile_shape(sizes: Sizes, layout: Layout) -> tuple[int, int, int]:
    """(frames, height, width) of the largest tile of `layout` (the first: split remainders go first)."""
    from ltx_tdp.tiling import AxisTiling

    f, h, w = sizes.video_latent
    hi = AxisTiling(layout.height, layout.overlap).intervals(h)[0]
    wi = AxisTiling(layout.width, layout.overlap).intervals(w)[0]
    return f, hi.end - hi.start, wi.end - wi.start


def transformer_tiles(rec: Records, sizes: Sizes) -> None:
    """Stage-2 model calls through the TDP patcher: one GPU's share of the call in groups of 4, 2, 8 GPUs
    (no all_reduce), and the whole 2 x 2 call on one GPU (4 tiles, the pack's single-GPU path)."""
    patcher, inputs = _build(rec, sizes)
    runs = [
        ("4 GPUs: one tile of 2x2", sizes.four, 0, 4, 2),
        ("2 GPUs: two tiles of 2x2", sizes.four, 0, 2, 1),
        ("1 GPU: all four tiles of 2x2", sizes.four, 0, 1, 1),
        ("8 GPUs: one tile of 2x4", sizes.eight, 0, 8, 1),
    ]
    for name, layout, rank, world, repeats in runs:
        share = RankShare(rank, world) if world > 1 else None
        model = tdp(patcher, layout, share)
        tile = _tile_shape(sizes, layout)
        for rep in range(repeats):
            try:
                out, seconds, peak = measure(lambda: model_call(model, inputs, sizes.sigma))
            except Exception as e:
                rec.add(name, "oom" if _oom(e) else "error", error=f"{type(e).__name__}: {e}"[:500], gpus=world,
                        layout=layout.label())
                torch.cuda.empty_cache() if device().type == "cuda" else None
                break
            finite = bool(torch.isfinite(out).all())
            rec.add(name, "ok", seconds=seconds, peak_gib=peak, gpus=world, layout=layout.label(),
                    tiles_run=share.tiles if share else layout.tiles, repeat=rep, largest_tile=list(tile),
                    tile_tokens=_tokens(tile), finite=finite)
            del out


def transformer_untiled(rec: Records, sizes: Sizes) -> None:
    """One stage-2 model call on the whole latent, unpatched (or the out-of-memory error it raises)."""
    patcher, inputs = _build(rec, sizes)
    try:
        out, seconds, peak = measure(lambda: model_call(patcher, inputs, sizes.sigma))
    except Exception as e:
        rec.add("untiled call", "oom" if _oom(e) else "error", error=f"{type(e).__name__}: {e}"[:500],
                tokens=_tokens(sizes.video_latent))
        return
    rec.add("untiled call", "ok", seconds=seconds, peak_gib=peak, tokens=_tokens(sizes.video_latent),
            finite=bool(torch.isfinite(out).all()))


def _vae_and_latent(rec: Records, sizes: Sizes) -> tuple[Any, torch.Tensor]:
    from ltx_tdp_devkit.ltx_helpers import randn

    vae, seconds, _ = measure(lambda: build_vae(sizes.vae_config))
    params = sum(p.numel() for p in vae.first_stage_model.decoder.parameters())
    rec.add("build LTX-2 VAE", "ok", seconds=seconds, decoder_parameters=params, dtype=str(vae.vae_dtype)[6:])
    return vae, randn(1, 128, *sizes.vae_latent, seed=9)


def vae_tiled(rec: Records, sizes: Sizes) -> None:
    """The pack's tiled decode at the node's defaults: time, peak GPU memory, frames in system memory."""
    from ltx_tdp.ltx.vae import decode_tiled

    vae, latent = _vae_and_latent(rec, sizes)
    settings = decode_settings(sizes.decode)
    decode_tiled(vae, latent[:, :, :2, :4, :4], settings)  # warm-up: load the VAE, pick kernels
    tiles: dict[str, int] = {}

    def progress(done: int, total: int) -> None:
        tiles["total"] = total

    try:
        frames, seconds, peak = measure(lambda: decode_tiled(vae, latent, settings, progress=progress))
    except Exception as e:
        rec.add("tiled decode", "oom" if _oom(e) else "error", error=f"{type(e).__name__}: {e}"[:500])
        return
    rec.add("tiled decode", "ok", seconds=seconds, peak_gib=peak, tiles=tiles.get("total"),
            frames_shape=list(frames.shape), output_gib=frames.numel() * frames.element_size() / 2**30,
            output=f"{str(frames.dtype)[6:]} on {frames.device}",
            settings=dataclasses.asdict(settings), node_inputs=sizes.decode, finite=bool(torch.isfinite(frames).all()))


class _FallbackSeen(logging.Handler):
    """Notices ComfyUI's warning that VAE.decode ran out of memory and fell back to its own tiled decode."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if "out of memory" in record.getMessage().lower():
            self.seen = True


def vae_untiled(rec: Records, sizes: Sizes) -> None:
    """ComfyUI's own `VAE.decode` (the VAEDecode node) on the whole clip: time, peak, or its OOM fallback."""
    vae, latent = _vae_and_latent(rec, sizes)
    with torch.inference_mode():
        vae.decode(latent[:, :, :2, :4, :4])  # warm-up
    seen = _FallbackSeen()
    logging.getLogger().addHandler(seen)
    try:
        with torch.inference_mode():
            frames, seconds, peak = measure(lambda: vae.decode(latent))
    except Exception as e:
        rec.add("VAE.decode, whole clip", "oom" if _oom(e) else "error", error=f"{type(e).__name__}: {e}"[:500])
        return
    finally:
        logging.getLogger().removeHandler(seen)
    status = "oom" if seen.seen else "ok"
    rec.add("VAE.decode, whole clip", status, seconds=seconds, peak_gib=peak, frames_shape=list(frames.shape),
            fell_back_to_comfy_tiled=seen.seen, finite=bool(torch.isfinite(frames).all()))
