"""The tiled decode node on one device, where its device choice must change nothing (tiny VAE of the suite).

The node (`LTXTDPTiledVAEDecode`) called with its defaults for everything but the tile sizes (its `device` input:
"default", this GPU only) returns exactly what today's one-device path (`ltx.vae.decode_tiled` without a group)
returns. Sequence parallel with one device has its own step (sequence_check.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from models import load_tiny_vae
from runtime import Records

DECODE_TILES = dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8)
"""Several tiles on the tiny VAE's 4 x 6 latent (4 spatial tiles, 2 temporal chunks)."""


def _node_defaults(node: type, given: dict) -> dict:
    """Every optional input of `node`'s schema that `given` leaves out, at its schema default (a combo without a
    default at its first option)."""
    out = {}
    for spec in node.define_schema().inputs:
        if spec.id in given:
            continue
        default = getattr(spec, "default", None)
        if default is None and getattr(spec, "options", None):
            default = spec.options[0]
        if default is not None:
            out[spec.id] = default
    return out


def decode_node_one_device(rec: Records, base_dir: Path) -> None:
    """The decode node with one device (its default) == today's `decode_tiled` on this device, bit for bit."""
    from ltx_tdp.ltx.vae import DecodeSettings, decode_tiled, image_batch
    from ltx_tdp.nodes.tiled_vae_decode import TiledVAEDecodeNode
    from ltx_tdp_devkit.ltx_helpers import randn

    vae = load_tiny_vae(base_dir)
    x = randn(1, 128, 4, 4, 6, seed=6)
    want = image_batch(decode_tiled(vae, x, DecodeSettings(**DECODE_TILES)))
    given = {"vae": vae, "samples": {"samples": x}, **DECODE_TILES}
    defaults = _node_defaults(TiledVAEDecodeNode, given)
    (got,) = TiledVAEDecodeNode.execute(**given, **defaults).args
    equal = got.shape == want.shape and torch.equal(got, want)
    diff = (got.double() - want.double()).abs().max().item() if got.shape == want.shape else float("inf")
    rec.add("decode node, one device == today's tiled decode", "ok" if equal else "fail", value=diff, limit=0.0,
            detail=f"bit-identical: {equal}; frames {tuple(got.shape)}; node inputs at their defaults: "
            f"{sorted(k for k in defaults)}; VAE on {vae.device}")
