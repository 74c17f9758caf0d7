"""The pack's main job end to end: a trained LTX model refines a video twice its trained size, untiled and with TDP,
through a headless ComfyUI, and the picture shows which is closer to the ground truth.

Run it through `bash scripts/run_example.sh [OUT_DIR]`, which prepares the runtime (scripts/env.sh) and runs this
file with the runtime's python. Steps:

1. a temporary ComfyUI base directory gets the quality benchmark's trained LTXV (bench/quality/trained/: ComfyUI's
   LTXVModel, trained on synthetic latent videos of up to 16 x 16 latent cells) and, in its input folder, a synthetic
   latent video of 32 x 32 cells whose ground truth is known (bench/quality/data.py): twice the trained range;
2. a headless ComfyUI (CPU) starts with this pack and the test node pack (the fixed text context: real LTX text
   encoders are many GB);
3. one prompt goes to POST /prompt: LoadLatent, then SamplerCustomAdvanced from sigma 0.625 (euler, 0.625, 0.4, 0)
   twice with the same noise: the model untiled, and the model through LTX TDP Tile Config + LTX TDP Model Patcher
   (2 x 2 tiles, overlap 5); SaveLatent keeps both (ltx_tdp_devkit.quality_example);
4. OUT_DIR gets ltx_tdp_example.png (ground truth | untiled | TDP, the error maps and their PSNR), the frames of
   each latent rendered as pictures, the latents, result.json and the API prompt. The last lines print both PSNRs and
   where the picture is. The server is always stopped.

This is a script, not pack code: it uses the pack's development kit (`ltx_tdp_devkit`, tests/ on the PYTHONPATH that
scripts/env.sh sets) and the quality benchmark (bench/quality).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from ltx_tdp_devkit.paths import PACK_ROOT, TEST_NODE_PACK
from ltx_tdp_devkit.quality_example import ExampleResult, example_case, example_config, run_example
from ltx_tdp_devkit.server import ComfyServer, PromptFailed, prepare_base_dir

log = logging.getLogger("ltx_tdp.example")

PICTURE = "ltx_tdp_example.png"
FRAME_SCALE = 16
"""Pixels per latent cell in the frame pictures (a 32-cell frame becomes 512 px)."""


def _parse_args(argv: list[str]) -> argparse.Namespace:
    case = example_case()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default="tdp_output", help="where the results go (default ./tdp_output)")
    p.add_argument("--base-dir", required=True, help="an empty ComfyUI base directory for this run")
    p.add_argument("--comfyui-dir", default=os.environ.get("TDP_COMFYUI_DIR"), help="the ComfyUI tree")
    p.add_argument("--tiles", type=int, nargs=2, default=case.tiles, metavar=("H", "W"), help="TDP tiles")
    p.add_argument("--overlap", type=int, default=case.overlap, help="TDP tile overlap in latent cells")
    p.add_argument("--video-seed", type=int, default=example_config().video_seed,
                   help="which synthetic video (default: the quality benchmark's first)")
    return p.parse_args(argv)


def _write_outputs(result: ExampleResult, out_dir: Path) -> Path:
    """The picture, the frames of every latent, the latents, result.json and the prompt; returns the picture."""
    from PIL import Image

    cfg = example_config()  # registers the checkout as the package ltx_tdp
    from ltx_tdp.bench.quality.render import example_figure, to_rgb

    out_dir.mkdir(parents=True, exist_ok=True)
    frames, latents = out_dir / "frames", out_dir / "latents"
    for folder in (frames, latents):  # files of an earlier run would mix with these
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    gt = result.latents["ground truth"]
    for name in ("ground truth", "untiled", "tdp"):
        for f in range(gt.shape[1]):
            rgb = (to_rgb(cfg, result.latents[name], gt, f) * 255).round().byte().numpy()
            image = Image.fromarray(rgb).resize((rgb.shape[1] * FRAME_SCALE, rgb.shape[0] * FRAME_SCALE), Image.NEAREST)
            image.save(frames / f"{name.replace(' ', '_')}_frame{f + 1}.png")
    for name, path in result.saved.items():
        shutil.copyfile(path, latents / f"{name.replace(' ', '_')}.latent")
    (out_dir / "workflow_api.json").write_text(json.dumps(result.prompt, indent=2))
    return example_figure(cfg, result.case, result.latents, result.psnrs, out_dir / PICTURE)


def main(argv: list[str]) -> int:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[ltx-tdp example] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    args = _parse_args(argv)
    if not args.comfyui_dir:
        log.error("no ComfyUI tree: run through scripts/run_example.sh (or pass --comfyui-dir)")
        return 2
    comfy_dir, base, out_dir = Path(args.comfyui_dir), Path(args.base_dir), Path(args.out_dir).resolve()
    case = example_case(tuple(args.tiles), args.overlap)
    t0 = time.monotonic()
    prepare_base_dir(base, PACK_ROOT, TEST_NODE_PACK, {})
    server = ComfyServer(comfy_dir=comfy_dir, base_dir=base, python=sys.executable)
    # SIGTERM / SIGHUP end the run through `finally`, so the server is stopped (SIGINT does so already).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    try:
        log.info("starting a headless ComfyUI (%s) with the pack", comfy_dir)
        server.start()
        t_ready = time.monotonic()
        version = server.get("/system_stats")["system"].get("comfyui_version", "unknown")
        log.info("ComfyUI %s is up on %s after %.1f s; refining a 32 x 32-cell video untiled and with TDP %d x %d",
                 version, server.url, t_ready - t0, *case.tiles)
        result = run_example(server, case, args.video_seed)
        t_done = time.monotonic()
    except (PromptFailed, RuntimeError, TimeoutError, OSError) as exc:
        log.error("FAILED: %s", exc)
        log.error("server log (last lines):\n%s", server.log_tail(40))
        return 1
    finally:
        server.stop()

    picture = _write_outputs(result, out_dir)
    untiled, tdp = result.psnrs["untiled"], result.psnrs["tdp"]
    (out_dir / "result.json").write_text(json.dumps({
        "comfyui": version, "video_seed": result.video_seed, "tiles": list(case.tiles), "overlap": case.overlap,
        "sigmas": list(case.sigmas), "psnr_db": {"untiled": untiled, "tdp": tdp},
        "seconds": {"server_start": t_ready - t0, "prompt": t_done - t_ready, "total": time.monotonic() - t0},
    }, indent=1))
    log.info("done in %.1f s (server start %.1f s, prompt %.1f s) on ComfyUI %s", time.monotonic() - t0,
             t_ready - t0, t_done - t_ready, version)
    log.info("  frames:   %s (each latent frame of the ground truth, untiled and TDP)", out_dir / "frames")
    log.info("  latents:  %s; workflow: %s (API format, as sent)", out_dir / "latents", out_dir / "workflow_api.json")
    log.info("PSNR against the ground truth: untiled %.2f dB, TDP %d x %d %.2f dB (TDP %+.2f dB)",
             untiled, *case.tiles, tdp, tdp - untiled)
    log.info("picture: %s", picture)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
