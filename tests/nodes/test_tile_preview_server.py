"""The tile preview over POST /prompt: a valid layout shows an image; a layout the patcher would refuse
fails the prompt with the patcher's message."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.server import PromptFailed, output_images

pytestmark = pytest.mark.server


def _prompt(width_tiles: int, width_overlap: int, width_px: int, seed: int) -> dict:
    return {
        "tiles": {"class_type": "LTXTDPTileConfig",
                  "inputs": {"frames_tiles": 1, "frames_overlap": 0, "height_tiles": 2, "height_overlap": 2,
                             "width_tiles": width_tiles, "width_overlap": width_overlap}},
        # `frames` varies per call: ComfyUI serves an identical prompt from its cache.
        "preview": {"class_type": "LTXTDPTilePreview",
                    "inputs": {"tiling": ["tiles", 0], "width": width_px, "height": 256, "frames": 1 + 8 * seed}},
    }


def test_a_valid_layout_previews_as_an_image(comfy_server):
    entry = comfy_server.run(_prompt(3, 2, 21 * 32, seed=1))
    images = output_images(entry)
    assert len(images) == 1 and images[0]["type"] == "temp", images


def test_a_refused_layout_fails_the_prompt_with_the_patchers_message(comfy_server):
    with pytest.raises(PromptFailed) as failed:
        comfy_server.run(_prompt(3, 8, 21 * 32, seed=2))
    message = str(failed.value)
    assert "LTXTDPTilePreview" in message, message
    assert ("width: 21 latent cells cannot take 3 tiles with overlap 8; "
            "the largest overlap that keeps the blend exact is 5") in message, message
