"""Memory of LTX-2.5's diffusion decode: one chunk's and one tile's work plus the output and the noise field,
flat in clip length (live-tensor meter), and at the node's defaults a 4K clip is cut into bounded tiles."""

from __future__ import annotations

import math

import pytest
import torch

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.memory import PeakTensorBytes
from ltx_tdp_devkit.vae_helpers import latent, tiled


@pytest.fixture(scope="module")
def dvae(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    return dv.load(seed=1)


def test_peak_memory_grows_by_the_output_and_its_noise_only_for_2x_and_4x_frames(dvae):
    settings = dict(spatial_tile=64, temporal_tile=16)
    tiled(dvae, latent(4, 2, 2), **settings)  # warm up: first-call allocations are not the decode's
    runs = {}
    for frames in (4, 7, 13):
        x = latent(frames, 2, 2, seed=frames)
        counter = PeakTensorBytes()
        with counter:
            out = tiled(dvae, x, **settings)
        runs[frames] = (out.numel() * out.element_size(), counter.peak)
        del out
    report = ", ".join(f"{8 * f - 7} frames: output {o / 2**20:.1f} MiB, peak {p / 2**20:.1f} MiB"
                       for f, (o, p) in runs.items())
    base_out, base_peak = runs[4]
    for frames in (7, 13):
        out_bytes, peak = runs[frames]
        # The noise field is the output's shape in the VAE's dtype (fp32 here): it grows as much as the output.
        extra = (peak - base_peak) - 2 * (out_bytes - base_out)
        allowed = 0.05 * (out_bytes - base_out) + 4 * 2**20
        assert extra <= allowed, f"peak grew {extra / 2**20:.1f} MiB more than output + noise; {report}"


def test_at_the_node_defaults_a_4k_clip_decodes_in_bounded_tiles_not_the_whole_clip(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    from comfy.ldm.lightricks.vae.na_diffusion_decoder import CausalDiffusionVAE
    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.ltx.vae.diffusion import DiffusionDecode
    from ltx_tdp.ltx.vae.diffusion_layers import read_layers
    from ltx_tdp.ltx.vae.settings import DIFFUSION_TILE_CAP
    from ltx_tdp.tiling.decode_plan import plan_decode
    from ltx_tdp.tiling.geometry import LTX_GEOMETRY

    with torch.device("meta"):
        layers = read_layers(CausalDiffusionVAE(config=dv.published_config()).decoder)
    cells = LTX_GEOMETRY.latent_shape(121, 2176, 3840)
    plan = plan_decode(cells, DecodeSettings().tile_sizes(DIFFUSION_TILE_CAP), (0, 0, 0), LTX_GEOMETRY)
    spans = DiffusionDecode(None, torch.empty(1, 128, *cells, device="meta"), plan, layers, (None, None), (0, 0),
                            torch.empty(0), ()).spans
    tokens = [math.prod(hi - lo + 1 for _, _, (lo, hi) in spans(t)) for t in plan.pixels.tiles]
    whole = 121 * 2176 * 3840 // 16  # stage-5 positions of the whole clip (4 x 4 pixels each)
    projected = max(tokens) * 6 * 256 * 2  # six 256-channel bf16 tensors per stage-5 position
    assert plan.pixels.counts == (1, 5, 8), f"tile counts {plan.pixels.counts}"
    assert max(tokens) < whole / 5, f"largest tile {max(tokens)} stage-5 positions of {whole}"
    assert projected <= 32e9, f"projected stage-5 peak {projected / 1e9:.1f} GB"
