"""Helpers of the tiled-decode tests: seeded latents, the untiled and tiled decodes, plans, PSNR and seams."""

from __future__ import annotations

import math
from typing import Any

import torch

DECODE = dict(spatial_tile=4096, spatial_overlap=0, temporal_tile=4096, temporal_overlap=0)
"""One tile covering everything (the settings' other fields at their defaults)."""


def latent(frames: int, height: int, width: int, seed: int = 0, batch: int = 1, channels: int = 128) -> torch.Tensor:
    return torch.randn(batch, channels, frames, height, width, generator=torch.Generator().manual_seed(seed))


def psnr(got: torch.Tensor, want: torch.Tensor) -> float:
    mse = torch.mean((got.double() - want.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def settings(**kw: Any):
    """DecodeSettings: DECODE with `kw` over it; `context=N` stands for quality "custom" with N cells."""
    from ltx_tdp.ltx.vae import DecodeSettings

    if "context" in kw:
        kw["quality"], kw["context_cells"] = "custom", kw.pop("context")
    return DecodeSettings(**{**DECODE, **kw})


def reach_cells(vae: Any) -> tuple[int, int]:
    """(time, space) reach of the VAE's decoder in latent cells, as the decode's "exact" quality uses it."""
    from ltx_tdp.ltx.vae.decoder import decoder_reach

    return decoder_reach(vae)


def untiled(vae: Any, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return vae.decode(x)


def tiled(vae: Any, x: Any, group: Any = None, progress: Any = None, **kw: Any) -> torch.Tensor:
    """decode_tiled with `settings(**kw)`."""
    from ltx_tdp.ltx.vae import decode_tiled

    return decode_tiled(vae, x, settings(**kw), group=group, progress=progress)


def plan(vae: Any, x: torch.Tensor, time_context: int = 1, space_context: int = 1, **kw: Any):
    """The decode plan (tiling.decode_plan.DecodePlan) of `settings(**kw)` with these contexts."""
    from ltx_tdp.ltx.vae.decoder import prepare_decode

    return prepare_decode(vae, x, settings(**kw), (time_context, space_context)).plan


def borders(intervals) -> list[int]:
    """Pixel edges where one tile's crop starts or ends inside the axis."""
    length = intervals[-1].end
    return sorted({i.start for i in intervals if i.start > 0} | {i.end for i in intervals if i.end < length})


def seam_ratio(img: torch.Tensor, axis: int, edges: list[int]) -> float:
    """Mean |gradient| across the given edges over the mean |gradient| everywhere else on `axis`."""
    grad = img.diff(dim=axis).abs()  # grad[k] is across the edge between pixel k and k+1
    at = torch.zeros(grad.shape[axis], dtype=torch.bool)
    at[[e - 1 for e in edges]] = True
    across = grad.index_select(axis, at.nonzero().flatten()).mean().item()
    inside = grad.index_select(axis, (~at).nonzero().flatten()).mean().item()
    return across / inside


class OneProcessGroup:
    """A stand-in TDPGroup whose `world` ranks all run in this process, one after another (a TileRanks for the
    decode). It keeps what each rank added to the output, and the job and plan a worker rank would receive."""

    def __init__(self, world: int):
        self.world, self.parts = world, []

    def ranks(self, kind: str, source: Any) -> "OneProcessGroup":
        return self

    def gather(self, job, partial, plan, add) -> None:
        self.job, self.plan = job, plan
        before = None
        for rank in range(self.world):
            out = partial(rank, self.world, None)  # the output, with the tiles of ranks 0..rank blended (from zeros)
            self.parts.append(out.clone() if before is None else out - before)
            before = out.clone()
