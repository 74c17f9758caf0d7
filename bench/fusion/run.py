"""The pack against Lightricks' tiled samplers, one command (not a test): every cell of bench/results/fusion.md.

    COMFYUI_SRC=/path/to/ComfyUI-0.33.0 bash -c 'source scripts/env.sh && "$TDP_PYTHON" bench/fusion/run.py'

Uses (or trains) the quality benchmark's model, cached under $LTX_TDP_CACHE/quality/<config hash>/; the figures of
each (case, sampler) and the wall times are cached beside it in fusion/. Writes bench/results/fusion.md and
fusion_*.png. Options: --timing (measure the wall times again, e.g. on a quiet machine, and rewrite the page),
--fresh (refine again), --smoke (the whole comparison at minimum size, results to a temporary folder),
--results DIR, --cache DIR.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from ltx_tdp_devkit import comfy_runtime
from ltx_tdp_devkit.pack import import_pack

log = logging.getLogger("ltx_tdp.bench.fusion")


def main() -> None:
    import_pack()
    from ltx_tdp.bench.quality.run import arguments, start

    parser = arguments(__doc__)
    parser.add_argument("--timing", action="store_true", help="measure the wall times again and rewrite the page")
    args = parser.parse_args()
    cache = start(args, "ltx_tdp.bench.fusion", "ltx_tdp.bench.quality")
    # The patcher warns at every refine (first sigma 0.85 is above its drift warning; 2 x 2 tiles at 2S are larger
    # than the range); the page says both once.
    logging.getLogger("ltx_tdp.ltx.model.patch").setLevel(logging.ERROR)
    out = write(args.smoke, cache, Path(tempfile.mkdtemp(prefix="ltx_tdp_fusion_results_")) if args.smoke else args.results,
                timing=args.timing or args.smoke, fresh=args.fresh)
    log.info("wrote %s", out)


def write(smoke: bool, cache: Path, results: Path, timing: bool, fresh: bool = False, progress: bool = True) -> Path:
    """Train (or find) the model, measure what is not cached (the wall times too when `timing` or none are
    cached), write the page into `results`; returns its path. The smoke test runs this at minimum size."""
    from ltx_tdp.bench.fusion import config, report, sweep
    from ltx_tdp.bench.quality import train

    cfg = config.SMOKE if smoke else config.FusionConfig()
    trained = train.train(cfg.train, cache, progress=progress)
    store = None if fresh else trained.checkpoint.parent / "fusion"
    if timing or store is None or not (store / sweep.TIMING).is_file():
        times = sweep.time_methods(cfg, trained, store, progress)
    else:
        times = None
    figures = sweep.run(cfg, trained, store, progress)
    if times is not None:
        figures.timing = times
    return report.write(cfg, trained, figures, results, comfy_runtime.comfyui_version())


if __name__ == "__main__":
    main()
