"""Latents out of a prompt run over `POST /prompt`: SaveLatent nodes added to an API prompt, read back as
tensors from the server's output folder (SaveLatent stores the samples as written, so equal files mean
bit-for-bit equal latents)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

SAVE_PREFIX = "t_save_"


def add_latent_saves(prompt: dict[str, Any], sources: dict[str, list], folder: str) -> dict[str, Any]:
    """Add one SaveLatent per `name -> [node id, output slot]`, writing under output/<folder>/<name>."""
    for name, source in sources.items():
        prompt[f"{SAVE_PREFIX}{name}"] = {"class_type": "SaveLatent",
                                          "inputs": {"samples": source, "filename_prefix": f"{folder}/{name}"}}
    return prompt


def saved_latents(comfy_base: Path, entry: dict, prompt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """name -> the latent each SaveLatent added by `add_latent_saves` wrote in this run (history `entry`)."""
    from safetensors.torch import load_file

    out = {}
    for node_id in prompt:
        if not node_id.startswith(SAVE_PREFIX):
            continue
        files = entry["outputs"][node_id]["latents"]
        assert len(files) == 1, f"{node_id} wrote {files}"
        path = comfy_base / "output" / files[0]["subfolder"] / files[0]["filename"]
        out[node_id[len(SAVE_PREFIX):]] = load_file(str(path))["latent_tensor"]
    return out
