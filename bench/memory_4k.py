"""A 4K clip (3840 x 2176 x 121) on one GPU by the pack's own accounting, printed as the tables of docs/vae-decode.md
and docs/tiled-model-call.md: LTX-2's and LTX-2.5's published configurations, built on the meta device (nothing
is allocated or downloaded; a CPU is enough).

* The tiled decode, at the node's defaults (24 GB) and at docs/vae-decode.md's 12 GB setting: the VAE's weights
  (bf16), the largest tile's decode, the pack's buffers, LTX-2.5's noise field drawn before the tiles, the frames in
  system memory (`TiledDecode.memory`, on ComfyUI's conv streaming chunk for that card).
* A 2 x 2 stage-2 step (overlap 5 latent cells, as the example workflows): the transformer's weights by dtype, and
  the largest tile's need as ComfyUI's `memory_required` gives it on an NVIDIA GPU (its PyTorch-attention branch:
  area x dtype size x 0.01 x memory_usage_factor MiB, area = batch x the packed input's length) plus the pack's
  buffers (ltx.model.memory.TileMemory: the fp64 accumulator, the tile's cut input, its weighted result), at batch 1
  (cfg 1, the LTX-2.5 templates) and batch 2 (cond + uncond).

    python bench/memory_4k.py        # with scripts/env.sh sourced (COMFYUI_SRC: a ComfyUI >= 0.32 for LTX-2.5)
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import torch

GIB = 2**30
FRAMES, HEIGHT, WIDTH = 121, 2176, 3840
AUDIO = (1, 8, 121, 16)
"""LTX-2's audio latent for 121 frames at 25 fps: 121 latents of 8 channels x 16 bins."""


def start_comfyui() -> None:
    import os

    sys.path.insert(0, os.environ["TDP_COMFYUI_DIR"])
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    from ltx_tdp_devkit.pack import import_pack

    import_pack()


def decode_rows() -> list[str]:
    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.tiling import LTX_GEOMETRY
    from ltx_tdp_devkit.diffusion_vae import has_diffusion_vae
    from ltx_tdp_devkit.real_vae import CARD_GIB, CARD_SETTINGS, accounting_vae

    latent = torch.zeros(1, 128, *LTX_GEOMETRY.latent_shape(FRAMES, HEIGHT, WIDTH))
    rows = ["| VAE | card | node inputs | tiles | weights | largest tile | pack's buffers | noise draw | GPU peak | "
            "system memory |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for (model, card), inputs in CARD_SETTINGS.items():
        if model == "LTX-2.5" and not has_diffusion_vae():
            rows.append(f"| {model} | {card} | needs ComfyUI >= 0.32 | | | | | | | |")
            continue
        decode = prepare_decode(accounting_vae(model), latent, DecodeSettings(**inputs))
        m = decode.memory(CARD_GIB[card] * GIB)
        words = ", ".join(f"{k} {v}" for k, v in inputs.items()) or "defaults"
        rows.append(f"| {model} | {card} | {words} | {' x '.join(map(str, decode.plan.pixels.counts))} | "
                    f"{m.weights / GIB:.2f} | {m.tile / GIB:.2f} | {m.buffers / GIB:.2f} | {m.draw / GIB:.2f} | "
                    f"**{m.device_peak / GIB:.2f}** | {m.host / GIB:.2f} |")
    return rows


def transformer(overrides: dict) -> tuple[dict, object]:
    """(parameter bytes by kind, the model config ComfyUI detects) of LTXAVModel at `overrides`, on meta."""
    import comfy.model_detection
    import comfy.ops
    from comfy.ldm.lightricks.av_model import LTXAVModel

    with torch.device("meta"):
        dm = LTXAVModel(**overrides, operations=comfy.ops.disable_weight_init, device=torch.device("meta"))
    sd = dm.state_dict()
    metadata = {"config": json.dumps({"transformer": overrides})} if overrides else None
    config = comfy.model_detection.model_config_from_unet(sd, "", metadata=metadata)
    blocks = sum(t.numel() for k, t in sd.items() if k.startswith("transformer_blocks.") and t.ndim == 2)
    return {"params": sum(t.numel() for t in sd.values()), "block_linears": blocks}, config


def step_rows() -> list[str]:
    from ltx_tdp.ltx.model.call import TDPSettings
    from ltx_tdp.ltx.model.memory import TileMemory
    from ltx_tdp.tiling import LTX_GEOMETRY, AxisTiling, TileCountConfig
    from ltx_tdp_devkit.ltx25_files import MARKER
    from ltx_tdp_devkit.paths import comfyui_has_ltx25
    from ltx_tdp_devkit.tiny_models import LTX25_SWITCHES

    video = (1, 128, *LTX_GEOMETRY.latent_shape(FRAMES, HEIGHT, WIDTH))
    settings = TDPSettings(TileCountConfig(AxisTiling(1, 0), AxisTiling(2, 5), AxisTiling(2, 5)))
    rows = ["| transformer | parameters | weights, bf16 | weights, fp8 / int8 blocks | largest tile, batch 1 | "
            "batch 2 | bf16 weights + tile (batch 1) | fp8 weights + tile (batch 1) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    import os

    models = [("LTX-2", {})]
    if comfyui_has_ltx25(Path(os.environ["TDP_COMFYUI_DIR"])):
        models.append(("LTX-2.5", {**LTX25_SWITCHES, **MARKER}))
    for name, overrides in models:
        counts, config = transformer(overrides)
        factor = float(config.memory_usage_factor)
        memory = TileMemory(settings, types.SimpleNamespace(device=torch.device("cuda")))
        memory.latent_shapes = [video, AUDIO]
        need = []
        for batch in (1, 2):
            shape, extra = memory.layout((batch, 1, math.prod(video[1:]) + math.prod(AUDIO[1:])), 0)
            area = shape[0] * math.prod(shape[2:])
            need.append(area * 2 * 0.01 * factor * 2**20 + extra)
        bf16 = 2 * counts["params"]
        fp8 = bf16 - counts["block_linears"]
        rows.append(f"| {name} | {counts['params'] / 1e9:.2f} B | {bf16 / GIB:.1f} | {fp8 / GIB:.1f} | "
                    f"{need[0] / GIB:.2f} | {need[1] / GIB:.2f} | **{(bf16 + need[0]) / GIB:.1f}** | "
                    f"**{(fp8 + need[0]) / GIB:.1f}** |")
    return rows


def main() -> int:
    start_comfyui()
    print(f"## The tiled decode of a {WIDTH} x {HEIGHT} x {FRAMES} clip (GiB)\n")
    print("\n".join(decode_rows()))
    print(f"\n## A 2 x 2 stage-2 step at {WIDTH} x {HEIGHT} x {FRAMES} (overlap 5 cells; GiB)\n")
    print("\n".join(step_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
