"""Group decode memory: only rank 0 holds the clip's frames. A worker decodes one tile at a time and sends
it to rank 0, so its peak of live tensors (the tiled-decode tests' meter, run inside the worker) stays one
tile's decode plus the tiles in transfer, far below the frames of the clip."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import load_vae, randn
from ltx_tdp_devkit.memory import PeakTensorBytes
from ltx_tdp_devkit.server import free_port
from ltx_tdp_devkit.external_workers import start_test_worker
from ltx_tdp_devkit.vae_helpers import settings

pytestmark = pytest.mark.distributed

SETTINGS = settings(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8, context=1)
LATENT = (1, 128, 4, 8, 8)  # 25 frames of 256 x 256: 4 x 4 x 2 tiles


def test_a_decoding_worker_holds_one_tile_not_the_clip(comfy, comfy_dir, model_names, group_factory, tmp_path):
    from ltx_tdp.ltx.vae import decode_tiled
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.ltx.vae.pixels import pixels_on

    vae = load_vae(model_names)
    x = randn(*LATENT, seed=4)
    decode = prepare_decode(vae, x, SETTINGS)
    tiles = decode.plan.pixels.tiles
    decode.decode_raw(tiles[0])  # warm up: loading the VAE is not a tile's decode
    tile_peak = 0
    for tile in tiles:  # the largest decode of any one tile, as a worker sends it (raw pixels, contiguous)
        one_tile = PeakTensorBytes()
        with one_tile, torch.inference_mode():
            pixels_on(decode.decode_raw(tile), "cpu")
        tile_peak = max(tile_peak, one_tile.peak)
    tile_bytes = 4 * LATENT[0] * 3 * max(t.window().numel() for t in tiles)
    frames_bytes = 4 * torch.Size(decode.output_shape).numel()

    port, out = free_port(), tmp_path / "worker_peak.txt"
    worker = start_test_worker("metered_worker.py", comfy_dir, port, 60, TDP_METER_OUT=str(out))
    try:
        group = group_factory(2, timeout_s=60, external_workers=True, port=port, address="127.0.0.1")
        decode_tiled(vae, x, SETTINGS, group=group)  # warm up: loading the VAE replica is not the decode's peak
        multi = decode_tiled(vae, x, SETTINGS, group=group)
        err = (multi - decode_tiled(vae, x, SETTINGS)).abs().max().item()
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
