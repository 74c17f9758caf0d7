"""Helpers of the LTX Sequence Parallel tests: deeper tiny models (several blocks, so shards pass from block to
block), the node's entry point, a recorder of the video rows each block runs, and the error measure the bound is
stated in (docs/sequence-parallel.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

LTXV_LAYERS = 3
"""Blocks of the tests' LTXV (`deep_model(..., "ltxv", LTXV_LAYERS)`, the `ltxv3` fixture)."""

BOUND = 2e-6
"""Largest |sharded - one device| / max |one device| the tests allow. Measured on this CPU (fp32): 0 at cfg 1 and
where shards hold the whole batch; up to 6.6e-7 where a cond slice runs as batch 1 against batch 2 on one device;
up to 8.2e-7 where LTX-2.5's guide mask splits the queries differently on the shards (docs/sequence-parallel.md)."""


def deep_model(comfy, comfy_base: Path, kind: str, layers: int, seed: int = 0) -> Any:
    """A tiny `kind` model ("ltxv", "ltxav", "ltx25") with `layers` transformer blocks, through UNETLoader."""
    import folder_paths

    from ltx_tdp_devkit import tiny_models

    build = {"ltxv": tiny_models.build_ltxv, "ltxav": tiny_models.build_ltxav, "ltx25": tiny_models.build_ltx25}[kind]
    name = f"tdp_tiny_{kind}_{layers}_layers.safetensors"
    path = comfy_base / "models" / "diffusion_models" / name
    if not path.exists():
        build(path, seed=seed, num_layers=layers)
        folder_paths.filename_list_cache.clear()
    (model,) = comfy.run_node("UNETLoader", unet_name=name, weight_dtype="default")
    return model


def sequence(model: Any) -> Any:
    """`model` through the node's one entry point."""
    from ltx_tdp.ltx.sequence import apply_sequence_parallel

    return apply_sequence_parallel(model)


def relative_error(multi: torch.Tensor, single: torch.Tensor) -> float:
    return ((multi - single).abs().max() / single.abs().max()).item()


class BlockRows:
    """A ("double_block", i) replace set on the model before the node (as another pack's would be): records the
    number of video tokens of each block call, then runs the block."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def __call__(self, args: dict, extra: dict) -> dict:
        img = args["img"]
        self.rows.append(int((img[0] if isinstance(img, (tuple, list)) else img).shape[1]))
        return extra["original_block"](args)

    def on(self, model: Any, blocks: int) -> Any:
        m = model.clone()
        for i in range(blocks):
            m.set_model_patch_replace(self, "dit", "double_block", i)
        return m
