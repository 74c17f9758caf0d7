"""The pack's main job end to end: a TDP upscale through a headless ComfyUI, on a tiny real LTX model.

Run it through `bash scripts/run_example.sh [OUT_DIR]`, which prepares the runtime (scripts/env.sh) and
runs this file with the runtime's python. Steps:

1. build a tiny LTXV transformer and a tiny LTX video VAE (ComfyUI's own classes, seeded random weights)
   into a temporary ComfyUI base directory;
2. start a headless ComfyUI (CPU) with this pack and the test node pack (random text conditioning: real
   LTX text encoders are many GB);
3. POST the TDP upscale workflow (stage 1 at half size, latent x2, stage 2 tiled by TDP, VAE decode,
   SaveImage) and wait for it;
4. copy the frames to OUT_DIR (plus an animated GIF and the API prompt), print where they are and how long
   it took. The server is always stopped.

The model is random, so the frames are coloured noise: the command proves the pipeline, not the picture.
This is a script, not pack code: it uses the pack's development kit (`ltx_tdp_devkit`, tests/ on the
PYTHONPATH that scripts/env.sh sets).
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

from ltx_tdp_devkit.api_prompts import tdp_upscale_prompt
from ltx_tdp_devkit.paths import PACK_ROOT, TEST_NODE_PACK
from ltx_tdp_devkit.server import ComfyServer, PromptFailed, output_images, prepare_base_dir

log = logging.getLogger("ltx_tdp.example")

UNET_NAME = "tdp_tiny_ltxv.safetensors"
VAE_NAME = "tdp_tiny_ltx_vae.safetensors"


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default="tdp_output", help="where the frames go (default ./tdp_output)")
    p.add_argument("--base-dir", required=True, help="an empty ComfyUI base directory for this run")
    p.add_argument("--comfyui-dir", default=os.environ.get("TDP_COMFYUI_DIR"), help="the ComfyUI tree")
    p.add_argument("--width", type=int, default=512, help="output width in px (multiple of 64)")
    p.add_argument("--height", type=int, default=512, help="output height in px (multiple of 64)")
    p.add_argument("--length", type=int, default=17, help="frames (8k + 1)")
    p.add_argument("--tiles", type=int, nargs=2, default=(2, 2), metavar=("H", "W"), help="stage-2 tiles")
    p.add_argument("--overlap", type=int, default=4, help="stage-2 tile overlap in latent cells")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _build_models(comfy_dir: Path, base: Path) -> None:
    """Tiny LTXV + VAE with ComfyUI's own classes, configured for the CPU as `main.py --cpu` would be."""
    sys.path.insert(0, str(comfy_dir))  # ComfyUI's own code (it is not an installed package)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    from ltx_tdp_devkit import tiny_models

    tiny_models.build_ltxv(base / "models" / "diffusion_models" / UNET_NAME)
    tiny_models.build_vae(base / "models" / "vae" / VAE_NAME)


def _copy_frames(server: ComfyServer, entry: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("frame_*.png"):  # frames of an earlier run would mix with these
        stale.unlink()
    frames = []
    for i, image in enumerate(output_images(entry), start=1):
        src = server.base_dir / image.get("type", "output") / image.get("subfolder", "") / image["filename"]
        dst = out_dir / f"frame_{i:05d}.png"
        shutil.copyfile(src, dst)
        frames.append(dst)
    return frames


def _write_gif(frames: list[Path], path: Path, fps: int = 25) -> None:
    from PIL import Image

    images = [Image.open(f).convert("RGB") for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def _execution_seconds(entry: dict) -> float | None:
    stamps = {kind: data.get("timestamp") for kind, data in entry.get("status", {}).get("messages", [])}
    start, end = stamps.get("execution_start"), stamps.get("execution_success")
    return (end - start) / 1000.0 if start and end else None


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
    t0 = time.monotonic()

    log.info("building the tiny LTX model and VAE in %s", base)
    _build_models(comfy_dir, base)
    prepare_base_dir(base, PACK_ROOT, TEST_NODE_PACK, {})
    prompt = tdp_upscale_prompt(unet_name=UNET_NAME, vae_name=VAE_NAME, width=args.width, height=args.height,
                                length=args.length, tiles=tuple(args.tiles), overlap=args.overlap,
                                seed=args.seed, filename_prefix="ltx_tdp_example")

    server = ComfyServer(comfy_dir=comfy_dir, base_dir=base, python=sys.executable)
    # SIGTERM / SIGHUP end the run through `finally`, so the server is stopped (SIGINT does so already).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    try:
        t_start = time.monotonic()
        log.info("starting a headless ComfyUI (%s) with the pack", comfy_dir)
        server.start()
        t_ready = time.monotonic()
        log.info("ComfyUI is up on %s after %.1f s; queueing the TDP upscale (%dx%d px, %d frames, %dx%d tiles)",
                 server.url, t_ready - t_start, args.width, args.height, args.length, *args.tiles)
        entry = server.run(prompt, timeout=600)
        t_done = time.monotonic()
        frames = _copy_frames(server, entry, out_dir)
        if not frames:
            raise PromptFailed("the workflow finished but saved no images", entry)
        gif = out_dir / "ltx_tdp_example.gif"
        _write_gif(frames, gif)
        (out_dir / "workflow_api.json").write_text(json.dumps(prompt, indent=2))
    except (PromptFailed, RuntimeError, TimeoutError, OSError) as exc:
        log.error("FAILED: %s", exc)
        log.error("server log (last lines):\n%s", server.log_tail(40))
        return 1
    finally:
        server.stop()

    execution = _execution_seconds(entry)
    log.info("done: %d frames of %dx%d px in %s", len(frames), args.width, args.height, out_dir)
    log.info("  frames:   %s .. %s", frames[0].name, frames[-1].name)
    log.info("  preview:  %s", gif)
    log.info("  workflow: %s (API format, as sent to POST /prompt)", out_dir / "workflow_api.json")
    log.info("  took %.1f s: server start %.1f s, prompt %.1f s%s", time.monotonic() - t0, t_ready - t_start,
             t_done - t_ready, f" (ComfyUI execution {execution:.2f} s)" if execution else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
