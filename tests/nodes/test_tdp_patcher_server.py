"""The TDP upscale workflow over `POST /prompt` on a headless ComfyUI, and a refused tile layout.

Tiny sizes keep it fast: 256 x 256 px x 9 frames is an 8 x 8 x 2 latent in stage 2 (4 x 4 x 2 in stage 1).
"""

from __future__ import annotations

import itertools

import pytest

from ltx_tdp_devkit.api_prompts import tdp_upscale_prompt
from ltx_tdp_devkit.server import PromptFailed, output_images

pytestmark = pytest.mark.server

WIDTH = HEIGHT = 256
LENGTH = 9
_seeds = itertools.count(100)  # ComfyUI serves an identical prompt from its cache: every prompt gets its own seed


def _prompt(model_names, **kw):
    kw.setdefault("seed", next(_seeds))
    return tdp_upscale_prompt(unet_name=model_names["ltxv"], vae_name=model_names["vae"], width=WIDTH,
                              height=HEIGHT, length=LENGTH, filename_prefix=f"tdp_server_{kw['seed']}", **kw)


def _assert_frames(comfy_base, entry):
    from PIL import Image

    images = output_images(entry)
    assert len(images) == LENGTH, f"{len(images)} images saved for {LENGTH} frames"
    first = comfy_base / "output" / images[0]["subfolder"] / images[0]["filename"]
    with Image.open(first) as img:
        assert img.size == (WIDTH, HEIGHT), img.size


def test_tdp_upscale_workflow_runs_to_success_and_saves_frames(comfy_server, comfy_base, model_names):
    entry = comfy_server.run(_prompt(model_names, tiles=(2, 2), overlap=2), timeout=240)
    assert entry["status"]["status_str"] == "success"
    _assert_frames(comfy_base, entry)


@pytest.mark.parametrize("tiles, overlap, expected", [
    ((2, 9), 0, ["width", "8 latent cells", "9 tiles", "at most 8 tiles"]),
    ((3, 1), 3, ["height", "8 latent cells", "overlap 3", "largest overlap that keeps the blend exact is 2"]),
], ids=["more-width-tiles-than-cells", "overlap-breaks-the-blend"])
def test_bad_tile_layout_fails_with_a_clear_message_and_the_server_serves_the_next_prompt(
        comfy_server, comfy_base, model_names, tiles, overlap, expected):
    with pytest.raises(PromptFailed) as failure:
        comfy_server.run(_prompt(model_names, tiles=tiles, overlap=overlap), timeout=240)
    message = str(failure.value)
    missing = [part for part in expected if part not in message]
    assert not missing, f"the error lacks {missing}: {message}"
    assert "LTXTDPModelPatcher" in message or "KSampler" in message, message

    entry = comfy_server.run(_prompt(model_names), timeout=240)
    assert entry["status"]["status_str"] == "success"
    _assert_frames(comfy_base, entry)
