"""LTX TDP Tiled VAE Decode as a node, in-process: bit-identical to VAEDecode for one tile, its inputs reach the
decode, its default quality is exact, it logs its memory estimate, and a connected one-rank group decodes like
none."""

from __future__ import annotations

import torch

from ltx_tdp_devkit.vae_helpers import DECODE, latent, plan, psnr, reach_cells, tiled
from ltx_tdp_devkit.vae_helpers import settings as settings_of


def test_the_node_output_is_bit_identical_to_vae_decode_node_for_one_tile(comfy, vae):
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    samples = {"samples": latent(2, 2, 3, seed=1)}
    (want,) = comfy.run_node("VAEDecode", vae=vae, samples=samples)
    (got,) = comfy.run_node(TiledVAEDecodeNode, vae=vae, samples=samples, **DECODE)
    assert tuple(got.shape) == (9, 64, 96, 3), f"IMAGE shape {tuple(got.shape)}"
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"


def test_the_node_logs_its_memory_estimate_before_it_decodes(comfy, vae, caplog):
    import logging

    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    x = latent(2, 4, 6, seed=3)
    settings = dict(spatial_tile=96, spatial_overlap=32, temporal_tile=4096, temporal_overlap=0)
    estimate = prepare_decode(vae, x, settings_of(**settings)).memory().describe()
    with caplog.at_level(logging.INFO, logger="ltx_tdp"):
        comfy.run_node(TiledVAEDecodeNode, vae=vae, samples={"samples": x}, **settings)
    lines = [r.getMessage() for r in caplog.records if "memory:" in r.getMessage()]
    assert len(lines) == 1 and estimate in lines[0], f"logged {lines}; the estimate is {estimate}"
    assert "GPU" in estimate and "largest tile" in estimate and "system memory" in estimate, estimate


def test_the_nodes_context_cells_input_reaches_the_decode(comfy, vae):
    from ltx_tdp.ltx.vae import image_batch
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    x = latent(2, 4, 6, seed=2)
    settings = dict(spatial_tile=96, spatial_overlap=32, temporal_tile=4096, temporal_overlap=0)
    results = {}
    for cells in (1, 3):
        (got,) = comfy.run_node(TiledVAEDecodeNode, vae=vae, samples={"samples": x}, context_cells=cells,
                                quality="custom", **settings)
        assert torch.equal(got, image_batch(tiled(vae, x, context=cells, **settings))), cells
        results[cells] = got
    assert not torch.equal(results[1], results[3]), "context_cells changed nothing"


def test_the_nodes_default_quality_gives_every_tile_the_decoders_reach_and_matches_vae_decode(comfy, vae,
                                                                                             model_names):
    """Exact, not close: decoded in float64 (the same VAE file, ComfyUI's VAE built in float64) the node's 4 tiles
    equal VAEDecode within one unit in the last place of the fp32 frames (0 on ComfyUI 0.3.75, 3e-8 on 0.24 and
    0.33, where the fp32 cast and the post-processing come in another order). In float32 they differ by
    convolution rounding only (the tiles' convolutions sum in another order): 1.1e-5 at most on 0.3.75."""
    import folder_paths
    from comfy import sd as comfy_sd, utils as comfy_utils  # `comfy` is the fixture here

    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    time_reach, space_reach = reach_cells(vae)
    x = latent(3, 4, 14, seed=12)
    layout = plan(vae, x, time_reach, space_reach, spatial_tile=128)
    assert layout.pixels.counts == (1, 1, 4), f"tile counts {layout.pixels.counts}"
    sd, meta = comfy_utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", model_names["vae"]),
                                           return_metadata=True)
    fp64 = comfy_sd.VAE(sd=sd, metadata=meta, dtype=torch.float64)
    for name, v, limit in (("float64", fp64, torch.finfo(torch.float32).eps), ("float32", vae, 3e-5)):
        (got,) = comfy.run_node(TiledVAEDecodeNode, vae=v, samples={"samples": x}, spatial_tile=128)
        (want,) = comfy.run_node("VAEDecode", vae=v, samples={"samples": x})
        diff = (got - want).abs().max().item()
        assert diff <= limit, f"default quality (context {space_reach} cells), {name}: max difference " \
            f"{diff:.2e}, PSNR {psnr(got, want):.1f} dB"


def test_the_node_decodes_through_a_connected_tdp_group_like_without_one(comfy, vae):
    """A one-rank group (no worker process) runs the same decode in this process; the multi-GPU cases are in
    tests/multigpu/test_vae_decode_group.py."""
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import GroupSettings
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    group = get_group(GroupSettings(devices=("cpu",), backend="gloo"))
    samples = {"samples": latent(2, 2, 6, seed=4)}
    settings = dict(spatial_tile=128, spatial_overlap=32, temporal_tile=4096, temporal_overlap=0)
    try:
        (want,) = comfy.run_node(TiledVAEDecodeNode, vae=vae, samples=samples, **settings)
        (got,) = comfy.run_node(TiledVAEDecodeNode, vae=vae, samples=samples, tdp_group=group, **settings)
    finally:
        group.shutdown()
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"


def test_the_node_defaults_are_the_decode_settings_defaults():
    """One set of defaults: the node's inputs default to DecodeSettings(), which the decode, the benchmarks and the
    GPU check (which cannot import the node on a bare GPU machine) use directly."""
    import dataclasses

    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode

    schema = {i.id: i.default for i in TiledVAEDecodeNode.define_schema().inputs if hasattr(i, "default")}
    settings = dataclasses.asdict(DecodeSettings())
    node = {k: schema.get(k) for k in settings if k != "seed"}
    assert node == {k: v for k, v in settings.items() if k != "seed"}, f"node defaults {node}, DecodeSettings {settings}"
