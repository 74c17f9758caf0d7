"""The trained model shipped with the repository (`model.SHIPPED_CHECKPOINT`), and how closely a retrain matches it.

`ship` writes a trained checkpoint there with ComfyUI's config metadata (`{"config": {"transformer": ...}}`, which
UNETLoader reads) and a record of how it was made (`ltx_tdp_quality`: the training config and its cache key, the
ComfyUI and torch it was trained on, the loss). `compare` measures a retrain against it: the largest weight
difference and the main job's case (untiled and TDP PSNR on the benchmark's first video) refined with each.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import torch

from . import data
from .config import BenchConfig
from .metrics import psnr
from .methods import Refiner
from .model import SHIPPED_CHECKPOINT, conditioning, load_model
from .sweep import noise_for
from .train import Trained

log = logging.getLogger("ltx_tdp.bench.quality")

RECORD_KEY = "ltx_tdp_quality"
"""The shipped file's metadata entry that says how it was made."""
RETRAIN_COMMAND = "bash -c 'source scripts/env.sh && \"$TDP_PYTHON\" bench/quality/run.py --train-only --ship'"


def ship(cfg: BenchConfig, trained: Trained, comfy_version: str, path: Path = SHIPPED_CHECKPOINT) -> Path:
    """Write `trained`'s weights (fp32, as trained) to `path` with the config ComfyUI's loader reads and a record of
    how they were made; the weights are the checkpoint's, bit for bit."""
    from safetensors.torch import load_file, save_file

    t = cfg.train
    tail = trained.losses[-100:]
    record = {"train_config_key": t.key(), "train_config": asdict(t), "comfyui": comfy_version,
              "torch": torch.__version__, "training_seconds": round(trained.seconds, 1),
              "last_100_steps_mean_loss": sum(tail) / len(tail), "retrain": RETRAIN_COMMAND}
    metadata = {"config": json.dumps({"transformer": t.model.transformer_config()}), RECORD_KEY: json.dumps(record)}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(load_file(str(trained.checkpoint)), str(path), metadata=metadata)
    log.info("shipped %s (%.1f MB)", path, path.stat().st_size / 1e6)
    return path


def record(path: Path = SHIPPED_CHECKPOINT) -> dict:
    """How the shipped model was made (its `ltx_tdp_quality` metadata)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()[RECORD_KEY])


def weight_difference(a: Path, b: Path) -> dict[str, float]:
    """The largest |difference| of any weight of two checkpoints with the same tensors, and that over the largest
    |weight| (0.0: identical)."""
    from safetensors.torch import load_file

    sa, sb = load_file(str(a)), load_file(str(b))
    if sa.keys() != sb.keys():
        raise ValueError(f"{a.name} and {b.name} hold different tensors: {sorted(sa.keys() ^ sb.keys())[:5]}")
    diff = max(float((sa[k].float() - sb[k].float()).abs().max()) for k in sa)
    scale = max(float(sa[k].float().abs().max()) for k in sa)
    return {"max_abs": diff, "max_relative": diff / scale}


def example_psnrs(cfg: BenchConfig, checkpoint: Path) -> dict[str, float]:
    """PSNR (dB) of the untiled and the TDP refine of the default case on the benchmark's first video, refined in this
    process as the benchmark refines it (the main job sends the same through a server)."""
    refiner = Refiner(load_model(checkpoint), conditioning(cfg.train.model))
    gt = data.video(cfg.train.data, cfg.cells, cfg.cells, cfg.video_seed)[None]
    noise = noise_for(cfg.video_seed, gt.shape)
    d = cfg.default
    return {name: psnr(refiner.refine(method, gt, noise, d.sigmas, d.tiles, d.overlap)[0], gt)
            for name, method in (("untiled", "full"), ("tdp", "tdp"))}


def compare(cfg: BenchConfig, retrained: Path, shipped: Path = SHIPPED_CHECKPOINT) -> dict:
    """How closely `retrained` matches the shipped model: weights, and the main job's case refined with each."""
    out = {"weights": weight_difference(retrained, shipped),
           "psnr_db": {"retrained": example_psnrs(cfg, retrained), "shipped": example_psnrs(cfg, shipped)},
           "shipped_record": record(shipped)}
    log.info("retrain vs shipped: %s", json.dumps(out, indent=1))
    return out
