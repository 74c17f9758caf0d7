"""The pack's in-process multi-device nodes on one device, where they must change nothing (tiny models of the suite).

* The tiled decode node (`LTXTDPTiledVAEDecode`) called with its defaults for everything but the tile sizes
  returns exactly what today's one-device path (`ltx.vae.decode_tiled` without a group) returns. The node's
  device choice, where it has one, is left at its default (this GPU only).
* Sequence parallel (`LTXTDPSequenceParallel`, nodes/sequence_parallel.py) with one device returns a model whose
  call is bit-identical to the unpatched model's. The step is skipped (steps.py) where this checkout has no
  nodes/sequence_parallel.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from correctness import LATENT, SIGMA
from models import call_inputs, load_tiny_transformer, load_tiny_vae, model_call
from runtime import Records

SP_NODE_ID = "LTXTDPSequenceParallel"
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


def _sp_node() -> type:
    """The node class whose schema's node_id is LTXTDPSequenceParallel in nodes/sequence_parallel.py."""
    from ltx_tdp.nodes import sequence_parallel

    for _, cls in inspect.getmembers(sequence_parallel, inspect.isclass):
        if cls.__module__ == sequence_parallel.__name__ and hasattr(cls, "define_schema"):
            if cls.define_schema().node_id == SP_NODE_ID:
                return cls
    raise LookupError(f"nodes/sequence_parallel.py defines no node {SP_NODE_ID}")


def sequence_parallel_one_device(rec: Records, base_dir: Path) -> None:
    """LTXTDPSequenceParallel at its defaults (one device) leaves the model's call bit-identical, fp32 and bf16."""
    node = _sp_node()
    for dtype in (torch.float32, torch.bfloat16):
        model = load_tiny_transformer(base_dir, dtype)
        given: dict[str, Any] = {"model": model}
        defaults = _node_defaults(node, given)
        (patched,) = node.execute(**given, **defaults).args[:1]
        inputs = call_inputs(model, LATENT, 5, 8, seed=8)
        want = inputs.video(model_call(model, inputs, SIGMA))
        got = inputs.video(model_call(patched, inputs, SIGMA))
        equal = got.shape == want.shape and torch.equal(got, want)
        rec.add(f"sequence parallel, one device == unpatched ({str(dtype)[6:]})", "ok" if equal else "fail",
                value=(got.double() - want.double()).abs().max().item() if got.shape == want.shape else float("inf"),
                limit=0.0, detail=f"bit-identical: {equal}; node inputs at their defaults: {sorted(defaults)}; "
                f"x0 {tuple(want.shape)} on {want.device}")
