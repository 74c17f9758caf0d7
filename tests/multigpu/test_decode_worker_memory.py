"""Group decode memory: only rank 0 holds the clip's frames. A worker decodes one tile at a time and sends
it to rank 0, so its peak of live tensors (the tiled-decode tests' meter, run inside the worker) stays one
tile's decode plus the tiles in transfer, far below the frames of the clip."""

from __future__ import annotations

import pytest
import torch

from support.ltx_helpers import load_vae, randn
from support.paths import PACK_ROOT
from support.server import free_port
from support.external_workers import start_test_worker

pytestmark = pytest.mark.distributed

SETTINGS = dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8)
LATENT = (1, 128, 4, 8, 8)  # 25 frames of 256 x 256: 4 x 4 x 2 tiles


def test_a_decoding_worker_holds_one_tile_not_the_clip(comfy, comfy_dir, model_names, group_factory, tmp_path):
    from ltx_tdp.ltx.vae_decode import decode_tiled, prepare_decode
    from ltx_tdp.ltx.vae_replica import vae_runner

    meter = _load_meter()
    vae = load_vae(model_names)
    x = randn(*LATENT, seed=4)
    decode = prepare_decode(vae, x, **SETTINGS)
    tiles = decode.plan.pixels.tiles
    decode.decode_tile(tiles[0])  # warm up: loading the VAE is not a tile's decode
    tile_peak = 0
    for tile in tiles:  # the largest decode of any one tile, weighted as a worker sends it
        one_tile = meter()
        with one_tile, torch.inference_mode():
            decode.decode_tile(tile).to("cpu", torch.float32) * tile.window()
        tile_peak = max(tile_peak, one_tile.peak)
    tile_bytes = 4 * LATENT[0] * 3 * max(t.window().numel() for t in tiles)
    frames_bytes = 4 * torch.Size(decode.output_shape).numel()

    port, out = free_port(), tmp_path / "worker_peak.txt"
    worker = start_test_worker("metered_worker.py", comfy_dir, port, 60, TDP_METER_OUT=str(out))
    try:
        group = group_factory(2, timeout_s=60, external_workers=True, port=port, address="127.0.0.1")
        over = vae_runner(group, vae)
        decode_tiled(vae, x, group=over, **SETTINGS)  # warm up: loading the VAE replica is not the decode's peak
        multi = decode_tiled(vae, x, group=over, **SETTINGS)
        err = (multi - decode_tiled(vae, x, **SETTINGS)).abs().max().item()
        assert err <= 1e-6, f"the metered 2-rank decode differs from single-process by {err:.3e}"
        group.shutdown()
        assert worker.wait(timeout=60) == 0, "the metered worker did not end cleanly"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    peaks = [float(v) for v in out.read_text().split()]
    peak = peaks[-1]
    limit = tile_peak + 3 * tile_bytes + 2**20
    report = (f"worker peak {peak / 2**20:.2f} MiB; largest one-tile decode {tile_peak / 2**20:.2f} MiB, a tile "
              f"{tile_bytes / 2**20:.2f} MiB, the clip's frames {frames_bytes / 2**20:.2f} MiB ({len(tiles)} tiles)")
    assert peak <= limit, f"{report}; limit one tile's decode + 3 tiles + 1 MiB = {limit / 2**20:.2f} MiB"
    assert frames_bytes > limit - tile_peak, f"{report}: a worker holding the frames would pass too"


def _load_meter():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tdp_decode_meter", PACK_ROOT / "tests" / "comfy" /
                                                  "test_tiled_vae_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PeakTensorBytes
