"""The tiled VAE decode over `POST /prompt` on a headless ComfyUI: a tiny sampled video decoded in tiles of space
and time, and a refused tile setting that names the problem."""

from __future__ import annotations

import itertools

import pytest

from ltx_tdp_devkit.server import PromptFailed, output_images

pytestmark = pytest.mark.server

WIDTH, HEIGHT, LENGTH = 128, 128, 25  # a 4 x 4 x 4 latent: 2 x 2 spatial tiles of 96 px, 2 chunks of 24 frames
_seeds = itertools.count(500)  # ComfyUI serves an identical prompt from its cache: every prompt gets its own seed


def _prompt(model_names, spatial_tile: int = 96, spatial_overlap: int = 32, temporal_tile: int = 24,
            temporal_overlap: int = 8) -> dict:
    seed = next(_seeds)
    return {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": model_names["ltxv"], "weight_dtype": "default"}},
        "positive": {"class_type": "TDPTestRandomConditioning",
                     "inputs": {"seed": 2 * seed, "tokens": 8, "dim": 16}},
        "negative": {"class_type": "TDPTestRandomConditioning",
                     "inputs": {"seed": 2 * seed + 1, "tokens": 8, "dim": 16}},
        "empty": {"class_type": "EmptyLTXVLatentVideo",
                  "inputs": {"width": WIDTH, "height": HEIGHT, "length": LENGTH, "batch_size": 1}},
        "sample": {"class_type": "KSampler",
                   "inputs": {"model": ["unet", 0], "seed": seed, "steps": 1, "cfg": 1.0, "sampler_name": "euler",
                              "scheduler": "simple", "positive": ["positive", 0], "negative": ["negative", 0],
                              "latent_image": ["empty", 0], "denoise": 1.0}},
        "vae": {"class_type": "TDPTestVAELoader", "inputs": {"vae_name": model_names["vae"]}},
        "decode": {"class_type": "LTXTDPTiledVAEDecode",
                   "inputs": {"vae": ["vae", 0], "samples": ["sample", 0], "spatial_tile": spatial_tile,
                              "spatial_overlap": spatial_overlap, "temporal_tile": temporal_tile,
                              "temporal_overlap": temporal_overlap}},
        "save": {"class_type": "SaveImage",
                 "inputs": {"images": ["decode", 0], "filename_prefix": f"tdp_tiled_decode_{seed}"}},
    }


def _assert_frames(comfy_base, entry) -> None:
    from PIL import Image

    images = output_images(entry)
    assert len(images) == LENGTH, f"{len(images)} images saved for {LENGTH} frames"
    first = comfy_base / "output" / images[0]["subfolder"] / images[0]["filename"]
    with Image.open(first) as img:
        assert img.size == (WIDTH, HEIGHT), f"saved frame is {img.size}, want {(WIDTH, HEIGHT)}"


def test_a_workflow_ending_in_the_tiled_decode_runs_to_success_and_saves_every_frame(comfy_server, comfy_base,
                                                                                      model_names):
    entry = comfy_server.run(_prompt(model_names), timeout=240)
    assert entry["status"]["status_str"] == "success", entry["status"]
    _assert_frames(comfy_base, entry)


def test_a_tile_too_small_for_its_overlap_fails_with_a_clear_message_and_the_server_goes_on(comfy_server, comfy_base,
                                                                                          model_names):
    with pytest.raises(PromptFailed) as failure:
        comfy_server.run(_prompt(model_names, spatial_tile=64, spatial_overlap=32), timeout=240)
    message = str(failure.value)
    expected = ["LTXTDPTiledVAEDecode", "a tile of 64 pixels is too small for an overlap of 32 pixels"]
    missing = [part for part in expected if part not in message]
    assert not missing, f"the error lacks {missing}: {message}"

    entry = comfy_server.run(_prompt(model_names), timeout=240)
    assert entry["status"]["status_str"] == "success", entry["status"]
    _assert_frames(comfy_base, entry)
