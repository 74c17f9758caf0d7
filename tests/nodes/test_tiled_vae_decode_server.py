"""The tiled VAE decode over `POST /prompt` on a headless ComfyUI: a tiny sampled video decoded in tiles of space
and time, a refused tile setting that names the problem, and (on a server of its own that reports two devices) the
decode on both devices, equal to one device's frames (the first prompt, saved without the `device` input, decodes on
one), a failing device that names itself and Cancel pressed while the other device decodes, each before a next
prompt that runs.

HARDWARE MOCK (the two-device tests only): that server starts with LTX_TDP_TEST_FAKE_DEVICES=2, so the test node
pack makes `comfy.model_management.get_all_torch_devices` report cpu and cpu:1 (ltx_tdp_devkit.core_multigpu); the
VAE replicas, ComfyUI's model management, its MultiGPUThreadPool and the pack are real.
"""

from __future__ import annotations

import itertools
import re

import pytest

from ltx_tdp_devkit.server import PromptFailed, output_images

pytestmark = pytest.mark.server

WIDTH, HEIGHT, LENGTH = 128, 128, 25  # a 4 x 4 x 4 latent: 2 x 2 spatial tiles of 96 px, 2 chunks of 24 frames
_seeds = itertools.count(500)  # ComfyUI serves an identical prompt from its cache: every prompt gets its own seed


def _prompt(model_names, spatial_tile: int = 96, spatial_overlap: int = 32, temporal_tile: int = 24,
            temporal_overlap: int = 8, device: str | None = None, seed: int | None = None) -> dict:
    seed = next(_seeds) if seed is None else seed
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
                              "temporal_overlap": temporal_overlap, **({"device": device} if device else {})}},
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


LAYOUT = re.compile(r"the decode's (\d+) tiles over 2 devices: cpu (\d+), cpu:1 (\d+)")


def _frames(comfy_base, entry) -> list[bytes]:
    from PIL import Image

    out = []
    for image in output_images(entry):
        with Image.open(comfy_base / "output" / image["subfolder"] / image["filename"]) as img:
            out.append(img.tobytes())
    return out


def test_the_decode_on_two_devices_saves_the_one_device_frames(two_device_server, comfy_base, model_names):
    seed = next(_seeds)
    one = two_device_server.run(_prompt(model_names, seed=seed), timeout=240)  # no device input: a saved workflow
    log_before = len(two_device_server.log_text())
    two = two_device_server.run(_prompt(model_names, device="all", seed=seed), timeout=240)
    layouts = LAYOUT.findall(two_device_server.log_text()[log_before:])
    assert layouts and all(int(a) and int(b) for _, a, b in layouts), f"the pack logged {layouts}"
    assert _frames(comfy_base, two) == _frames(comfy_base, one), "two devices saved other frames than one"


def _failing(model_names, action: str) -> dict:
    prompt = _prompt(model_names, device="all")
    prompt["fail"] = {"class_type": "TDPTestFailVAEOnDevice", "inputs": {"vae": ["vae", 0], "action": action}}
    prompt["decode"]["inputs"]["vae"] = ["fail", 0]
    return prompt


def test_a_failing_decode_device_names_itself_and_the_next_prompt_runs(two_device_server, comfy_base, model_names):
    prompt = _failing(model_names, "fault")
    with pytest.raises(PromptFailed) as failure:
        two_device_server.run(prompt, timeout=240)
    message = str(failure.value)
    missing = [p for p in ("LTXTDPTiledVAEDecode", "cpu:1", "simulated fault on a decode device") if p not in message]
    assert not missing, f"the error lacks {missing}: {message}"

    entry = two_device_server.run(_prompt(model_names, device="all"), timeout=240)
    assert entry["status"]["status_str"] == "success", entry["status"]
    _assert_frames(comfy_base, entry)


def test_cancel_on_the_other_decode_device_interrupts_the_prompt_and_the_next_prompt_runs(two_device_server, comfy_base,
                                                                                          model_names):
    with pytest.raises(PromptFailed) as failure:
        two_device_server.run(_failing(model_names, "cancel"), timeout=240)
    assert "execution_interrupted" in str(failure.value), str(failure.value)

    entry = two_device_server.run(_prompt(model_names, device="all"), timeout=240)
    assert entry["status"]["status_str"] == "success", entry["status"]
    _assert_frames(comfy_base, entry)
