"""Quality benchmark, one command (not a test): train the small LTXV (cached), refine, measure, report.

    bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/quality/run.py'            # ComfyUI 0.3.75
    COMFYUI_SRC=/path/to/ComfyUI bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/quality/run.py'

Writes bench/results/quality.md and bench/results/quality_*.png. The trained model is cached under
$LTX_TDP_CACHE/quality/<config hash>/ (default ~/.cache/ltx-tdp/quality/): a second run skips training.
Each case's results are cached beside the model (keyed by the case and the benchmark settings), so the
report is rebuilt, and a new case added, without refining the others again. Options: --train-only, --fresh (refine again), --smoke (the whole
benchmark at minimum size, results to a temporary folder), --results DIR, --cache DIR, --ship (write the trained
model to bench/quality/trained/, the file the main job runs), --compare-shipped (how the trained model differs from
the shipped one).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from ltx_tdp_devkit import comfy_runtime

log = logging.getLogger("ltx_tdp.bench.quality")


def default_cache() -> Path:
    """$LTX_TDP_CACHE/quality (default ~/.cache/ltx-tdp/quality): outside the checkout."""
    return Path(os.environ.get("LTX_TDP_CACHE", Path.home() / ".cache" / "ltx-tdp")) / "quality"


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options of every benchmark run.py: --smoke, --fresh, --results DIR, --cache DIR."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="minimum size, results to a temporary folder")
    parser.add_argument("--fresh", action="store_true", help="run the sweep even if its results are cached")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--cache", type=Path, default=default_cache())
    return parser


def start(args: argparse.Namespace, *loggers: str) -> Path:
    """Logging (INFO for `loggers`), ComfyUI in this process; returns the cache: `args.cache`, or for --smoke a fresh
    temporary one removed at exit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cache = args.cache
    if args.smoke:  # a fresh cache, removed at the end; the results stay in a temporary folder to look at
        cache = Path(tempfile.mkdtemp(prefix="ltx_tdp_quality_"))
        atexit.register(shutil.rmtree, cache, True)
    comfy_runtime.start_script(cache / "comfy_base")
    comfy_runtime.quiet()
    for name in loggers:
        logging.getLogger(name).setLevel(logging.INFO)
    return cache


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--train-only", action="store_true", help="train (or find in the cache) and stop")
    parser.add_argument("--ship", action="store_true",
                        help="write the trained model where the main job finds it (bench/quality/trained/)")
    parser.add_argument("--compare-shipped", action="store_true",
                        help="print how the trained model differs from the shipped one (weights, main job's PSNRs)")
    args = parser.parse_args()
    cache = start(args, "ltx_tdp.bench.quality")
    from ltx_tdp.bench.quality import config, train

    cfg = config.SMOKE if args.smoke else config.BenchConfig()
    trained = train.train(cfg.train, cache)
    log.info("model: %s (%s, %.0f s of training)", trained.checkpoint,
             "cached" if trained.from_cache else "trained now", trained.seconds)
    if args.ship or args.compare_shipped:
        from ltx_tdp.bench.quality import shipped

        if args.compare_shipped:
            shipped.compare(cfg, trained.checkpoint)
        if args.ship:
            shipped.ship(cfg, trained, comfy_runtime.comfyui_version())
    if args.train_only:
        return
    from ltx_tdp.bench.quality import report, sweep

    store = None if args.smoke or args.fresh else trained.checkpoint.parent / "sweep"
    results = sweep.run(cfg, trained, store=store)
    out = Path(tempfile.mkdtemp(prefix="ltx_tdp_quality_results_")) if args.smoke else args.results
    report.write(cfg, trained, results, out, comfy_runtime.comfyui_version())
    log.info("wrote %s", out / "quality.md")


if __name__ == "__main__":
    main()
