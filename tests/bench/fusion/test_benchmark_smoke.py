"""The comparison with Lightricks' tiled samplers at minimum size (bench/fusion, SMOKE): the rebuilt methods against
what they must equal, through ComfyUI's SamplerCustomAdvanced, and the whole page written by the command's path."""

from __future__ import annotations

import json
import math

import torch

from ltx_tdp.bench.fusion.config import SMOKE
from ltx_tdp.bench.fusion.methods import Methods, methods
from ltx_tdp.bench.fusion.peer import layout_of, peer_starts, tiled_fusion_sampler
from ltx_tdp.bench.fusion.run import write
from ltx_tdp.bench.fusion.sweep import one_thread
from ltx_tdp.bench.quality.methods import Refiner
from ltx_tdp.bench.quality.model import conditioning, load_model
from ltx_tdp.bench.quality.sweep import noise_for


def _setup(trained, cells: int = 2 * SMOKE.range_cells):
    """Methods and a Refiner on the smoke model, the smoke video at `cells` and its noise field."""
    from ltx_tdp.bench.quality import data

    model = load_model(trained.checkpoint)
    gt = data.video(SMOKE.train.data, cells, cells, SMOKE.video_seed)[None]
    return (Methods(SMOKE, model, conditioning(SMOKE.train.model)), Refiner(model, conditioning(SMOKE.train.model)),
            gt, noise_for(SMOKE.video_seed, gt.shape))


def _fusion(sampler: str, layout):
    from ltx_tdp_devkit.comfy_runtime import run_node

    (inner,) = run_node("KSamplerSelect", sampler_name=sampler)
    return tiled_fusion_sampler(inner, layout)


def test_step_fusion_with_one_tile_and_euler_is_bit_identical_to_the_untiled_run(comfy, smoke_trained):
    _, refiner, gt, noise = _setup(smoke_trained)
    one = refiner.sample(refiner.model, gt, noise, SMOKE.sigmas,
                         _fusion("euler", layout_of("pack", tiles=(1, 1), overlap=0, window="gaussian")))
    full = refiner.sample(refiner.model, gt, noise, SMOKE.sigmas, "euler")
    assert torch.equal(one, full), f"max difference {float((one - full).abs().max()):.3e}"


def test_step_fusion_on_the_pack_s_tiles_and_windows_with_euler_equals_the_pack(comfy, smoke_trained):
    """Euler's step is linear in x and x0, so stepping tiles and merging them is blending x0 and stepping once:
    the rebuilt fusion with the pack's windows must give the pack's result (fp32 rounding apart)."""
    _, refiner, gt, noise = _setup(smoke_trained)
    pack = refiner.sample(refiner.tdp_model(refiner.tiling(SMOKE.tiles, SMOKE.overlap), True), gt, noise, SMOKE.sigmas)
    fused = refiner.sample(refiner.model, gt, noise, SMOKE.sigmas, _fusion(
        "euler", layout_of("pack", tiles=SMOKE.tiles, overlap=SMOKE.overlap, window="trapezoid")))
    diff = float((pack - fused).abs().max())
    assert diff < 1e-5, f"fusion with the pack's windows differs from the pack by {diff:.3e}"


def test_step_fusion_forgets_a_history_sampler_s_memory(comfy, smoke_trained):
    """With one tile, fusion differs from the untiled run only in what each fresh two-sigma call forgets."""
    _, refiner, gt, noise = _setup(smoke_trained)
    one = refiner.sample(refiner.model, gt, noise, SMOKE.sigmas,
                         _fusion("dpmpp_2m", layout_of("pack", tiles=(1, 1), overlap=0, window="gaussian")))
    full = refiner.sample(refiner.model, gt, noise, SMOKE.sigmas, "dpmpp_2m")
    diff = float((one - full).abs().max())
    assert diff > 1e-4, f"dpmpp_2m through one-tile fusion equals the untiled run within {diff:.3e}"


def test_tokens_are_counted_per_tile_call_and_shifted_grids_cost_what_the_pack_costs(comfy, smoke_trained):
    bench, _, gt, noise = _setup(smoke_trained)
    n, steps, frames = gt.shape[-1], len(SMOKE.sigmas) - 1, gt.shape[2]
    with one_thread():
        runs = {m: bench.run(m, "euler", gt, noise) for m in ("full", "tdp", "tdp_grid_cycle2", "ltxv_tiled_fusion")}
    assert runs["full"].tokens == steps * frames * n * n, runs["full"].tokens
    tile = (n + SMOKE.overlap) // 2  # 2 x 2 tiles of (n + overlap) / 2 cells
    assert runs["tdp"].tokens == steps * frames * 4 * tile * tile, runs["tdp"].tokens
    assert runs["tdp_grid_cycle2"].tokens == runs["tdp"].tokens, runs["tdp_grid_cycle2"].tokens
    p = SMOKE.peer_tile
    count = len(peer_starts(n, p.height, p.overlap_h)) * len(peer_starts(n, p.width, p.overlap_w))
    assert runs["ltxv_tiled_fusion"].tokens == steps * frames * count * p.height * p.width, runs["ltxv_tiled_fusion"].tokens
    moved = float((runs["tdp_grid_cycle2"].out - runs["tdp"].out).abs().max())
    assert moved > 0, "the shifted grids gave the pack's output bit for bit"


def test_the_whole_comparison_runs_and_writes_its_page(comfy, smoke_trained, tmp_path):
    page = write(smoke=True, cache=smoke_trained.checkpoint.parent.parent, results=tmp_path, timing=True,
                 fresh=True, progress=False)
    text = page.read_text()
    for heading in ("## Headline", "## Inside the range", "## Wall time", "## Shifted grids", "## Verdicts"):
        assert heading in text, f"{heading!r} missing from the page:\n{text[:400]}"
    for s in SMOKE.samplers:
        assert (tmp_path / f"fusion_{s}.png").stat().st_size > 0, s
    summary = json.loads((tmp_path / "fusion.json").read_text())["summary"]
    cells = [(c.name, s, m, f) for c in SMOKE.cases() for s in SMOKE.samplers for m, f in summary[c.name][s].items()]
    expected = len(SMOKE.samplers) * sum(len(methods(SMOKE, c.cells)) for c in SMOKE.cases())
    assert len(cells) == expected, f"{len(cells)} (case, sampler, method) figures, expected {expected}"
    bad = [x for x in cells if x[3]["videos"] != SMOKE.videos or x[3]["tokens"] <= 0
           or not all(math.isfinite(x[3][k]) for k in ("psnr_gt", "texture_all"))]
    assert not bad, bad[:3]
