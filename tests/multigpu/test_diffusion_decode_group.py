"""LTX-2.5's diffusion video decoder over a real two-rank gloo group: the worker slices rank 0's one noise field,
so rank 0's frames equal the single-process tiled decode (and `vae.decode`)."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.vae_helpers import latent, plan, tiled, untiled

pytestmark = pytest.mark.distributed

LIMIT = 1e-6


def test_a_two_rank_group_decode_equals_the_single_process_one(comfy, group_factory):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    vae = dv.load(seed=5)
    x = latent(3, 2, 4, seed=9)
    settings = dict(spatial_tile=64, temporal_tile=16)
    counts = plan(vae, x, **settings).pixels.counts
    assert counts[0] > 1 and counts[2] > 1, f"tile counts {counts}"
    group = group_factory(2)
    reports: list[tuple[int, int]] = []
    multi = tiled(vae, x, group=group, progress=lambda done, total: reports.append((done, total)), **settings)
    single = tiled(vae, x, **settings)
    err = (multi - single).abs().max().item()
    assert err <= LIMIT, f"2 ranks differ from one process by {err:.2e} (limit {LIMIT:.0e})"
    full = (multi - untiled(vae, x)).abs().max().item()
    assert full <= 1e-5, f"the group's frames differ from vae.decode by {full:.2e}"
    assert reports[-1] == (reports[-1][1], reports[-1][1]), f"progress reports {reports}"
