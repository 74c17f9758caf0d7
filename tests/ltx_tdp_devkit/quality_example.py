"""The pack's main job through a headless ComfyUI: the quality benchmark's trained LTXV refines a synthetic video twice
its trained position range, untiled and with TDP, in one prompt (scripts/run_example.py; the example thumbnails).

The benchmark (`ltx_tdp.bench.quality`) has the model (`model.SHIPPED_CHECKPOINT`), the videos (`data`), the case
(`BenchConfig().default`: 2 x 2 tiles, overlap 5, sigmas 0.625, 0.4, 0), each video's noise field (`sweep.noise_seed`)
and the fixed text context (`model.context`). This module sends exactly what the benchmark's in-process refine uses
through `POST /prompt`, so that the numbers are the benchmark's own for that video:

* the ground truth reaches ComfyUI as a LATENT file in its input folder, read by LoadLatent;
* the noise is RandomNoise with the benchmark's noise seed (ComfyUI draws the same torch.randn field);
* the context is TDPTestRandomConditioning with the benchmark's seed and size, at its frame rate (LTXVConditioning).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .api_prompts import untiled_and_tdp_prompt
from .pack import import_pack
from .tiny_workflow_models import write_latent

PREFIX = "ltx_tdp_example"
OUTPUTS = ("untiled", "tdp")


@dataclass(frozen=True)
class ExampleResult:
    """One run of the main job's prompt: what was sent, what came back, and how close it is to the ground truth."""

    case: Any
    """The benchmark's Case refined (tiles, overlap, sigmas)."""
    video_seed: int
    prompt: dict
    latents: dict[str, torch.Tensor]
    """(C, F, H, W) latents: "ground truth", "noisy input" (at the first sigma), "untiled", "tdp"."""
    psnrs: dict[str, float]
    """PSNR (dB) of "untiled" and "tdp" against the ground truth, as the benchmark measures it."""
    saved: dict[str, Path]
    """The LATENT files: "ground truth" (the one sent, in ComfyUI's input folder), "untiled" and "tdp" (what
    SaveLatent wrote)."""


def example_config() -> Any:
    """The quality benchmark's settings (BenchConfig), which the shipped model was trained with."""
    import_pack()
    from ltx_tdp.bench.quality.config import BenchConfig

    return BenchConfig()


def example_case(tiles: tuple[int, int] | None = None, overlap: int | None = None) -> Any:
    """The benchmark's default case (2 x 2 tiles, overlap 5, sigmas 0.625, 0.4, 0), with other tiles or overlap."""
    case = example_config().default
    return dataclasses.replace(case, tiles=tuple(tiles or case.tiles),
                               overlap=case.overlap if overlap is None else overlap)


def place_inputs(base: Path, cfg: Any, video_seed: int) -> tuple[str, str, torch.Tensor]:
    """Link the shipped model into `base`'s diffusion_models folder and write video `video_seed` (2S x 2S cells) as a
    LATENT file into its input folder. Returns the model's and the latent's file names and the ground truth
    (1, C, F, H, W)."""
    from ltx_tdp.bench.quality import data
    from ltx_tdp.bench.quality.model import SHIPPED_CHECKPOINT

    if not SHIPPED_CHECKPOINT.is_file():
        raise FileNotFoundError(f"the trained model {SHIPPED_CHECKPOINT} is missing (bench/quality/run.py --ship)")
    model = base / "models" / "diffusion_models" / SHIPPED_CHECKPOINT.name
    model.parent.mkdir(parents=True, exist_ok=True)
    if not model.exists():
        model.symlink_to(SHIPPED_CHECKPOINT)
    gt = data.video(cfg.train.data, cfg.cells, cfg.cells, video_seed)[None]
    latent = write_latent(base / "input" / f"{PREFIX}_video_{video_seed}.latent", gt)
    return model.name, latent.name, gt


def example_prompt(cfg: Any, case: Any, video_seed: int, unet_name: str, latent_name: str,
                   filename_prefix: str) -> dict:
    """The main job's API prompt for `case` on video `video_seed` (untiled_and_tdp_prompt with the benchmark's noise
    seed, sigmas and context)."""
    from ltx_tdp.bench.quality.model import CONTEXT_SEED, FRAME_RATE
    from ltx_tdp.bench.quality.sweep import noise_seed

    if case.steps != 2:
        raise ValueError(f"the main job runs the benchmark's 2-step stage, not {case.steps} steps")
    model = cfg.train.model
    return untiled_and_tdp_prompt(unet_name=unet_name, latent_name=latent_name, sigmas=case.sigmas,
                                  noise_seed=noise_seed(video_seed), tiles=case.tiles, overlap=case.overlap,
                                  context_seed=CONTEXT_SEED, context_tokens=model.context_tokens,
                                  context_dim=model.caption_channels, frame_rate=FRAME_RATE,
                                  filename_prefix=filename_prefix)


def _saved_latent(server: Any, entry: dict, node: str) -> tuple[Path, torch.Tensor]:
    from safetensors.torch import load_file

    records = entry.get("outputs", {}).get(node, {}).get("latents", [])
    if not records:
        raise RuntimeError(f"SaveLatent ({node}) wrote nothing: {entry.get('outputs')}")
    r = records[0]
    path = server.base_dir / r.get("type", "output") / r.get("subfolder", "") / r["filename"]
    return path, load_file(str(path))["latent_tensor"].float()


def run_example(server: Any, case: Any = None, video_seed: int | None = None, timeout: float = 600.0) -> ExampleResult:
    """Refine video `video_seed` (default: the benchmark's first video) untiled and with TDP through `server` (a
    running ltx_tdp_devkit.server.ComfyServer with this pack and the test node pack) and measure both."""
    cfg = example_config()
    from ltx_tdp.bench.quality.metrics import psnr
    from ltx_tdp.bench.quality.sweep import noise_for

    case = case or cfg.default
    video_seed = cfg.video_seed if video_seed is None else video_seed
    unet, latent, gt = place_inputs(server.base_dir, cfg, video_seed)
    layout = f"{case.tiles[0]}x{case.tiles[1]}_ov{case.overlap}"
    prompt = example_prompt(cfg, case, video_seed, unet, latent, f"{PREFIX}/{layout}")
    entry = server.run(prompt, timeout=timeout)
    saved, latents = {"ground truth": server.base_dir / "input" / latent}, {"ground truth": gt[0]}
    sigma = case.sigmas[0]
    latents["noisy input"] = ((1 - sigma) * gt + sigma * noise_for(video_seed, gt.shape))[0]
    for name in OUTPUTS:
        saved[name], out = _saved_latent(server, entry, f"save_{name}")
        if out.shape != gt.shape or not torch.isfinite(out).all():
            raise RuntimeError(f"the {name} refine gave {tuple(out.shape)} (finite: {bool(torch.isfinite(out).all())}), "
                               f"expected a finite {tuple(gt.shape)}")
        latents[name] = out[0]
    psnrs = {name: psnr(latents[name], latents["ground truth"]) for name in OUTPUTS}
    return ExampleResult(case, video_seed, prompt, latents, psnrs, saved)
