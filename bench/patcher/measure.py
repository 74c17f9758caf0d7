"""What bench/bench_patcher.py times: one model call through ComfyUI's wrapper chain, patched and bare, in CPU
seconds of this process. ComfyUI must be running in this process (the script starts it) before a call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ...tiling import VIDEO_AXES, plan_tiles
from .cases import CONTEXT_DIM, CONTEXT_TOKENS, SIGMA, Case


class _Caller:
    """One apply_model call through ComfyUI's wrapper chain, with this patcher's wrappers and patches.

    `load()` makes this patcher the loaded one (it (un)applies the TDP object patch on the shared model); it
    is done once per sampling run in ComfyUI, so it stays out of the timed calls.
    """

    def __init__(self, model_patcher):
        self.patcher = model_patcher
        gen = torch.Generator().manual_seed(7)
        self.ctx = torch.randn(1, CONTEXT_TOKENS, CONTEXT_DIM, generator=gen)
        self.mask = torch.ones(1, CONTEXT_TOKENS, dtype=torch.long)

    def load(self) -> "_Caller":
        import comfy.model_management

        comfy.model_management.load_models_gpu([self.patcher])
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        opts = {"wrappers": self.patcher.wrappers}
        with torch.inference_mode():
            return self.patcher.model.apply_model(x, torch.full((x.shape[0],), SIGMA), c_crossattn=self.ctx,
                                                  attention_mask=self.mask, frame_rate=25.0,
                                                  transformer_options=opts)


def _time(fn: Callable[[], object]) -> float:
    """CPU seconds this process spends in `fn`: unlike wall time, barely moved by other load on the machine
    (with one torch thread it equals wall time on an idle machine)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def _latent(case: Case) -> torch.Tensor:
    return torch.randn(1, 128, *case.latent, generator=torch.Generator().manual_seed(case.tokens))


# -- 1. overhead ----------------------------------------------------------------------------------------------
PROBE_KEY = "ltx_tdp_bench_probe"


def _probed(model_patcher, inner_times: list[float], identity: bool = False):
    """Add an APPLY_MODEL wrapper inside TDP's (as another pack's would be) that times each tile's model
    call; with `identity` it skips the model and returns the tile input (x0 = x: TDP's own work only)."""
    import comfy.patcher_extension as ext

    def probe(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kw):
        if identity:
            return x
        start = time.process_time()
        out = executor(x, t, c_concat, c_crossattn, control, transformer_options, **kw)
        inner_times.append(time.process_time() - start)
        return out

    model_patcher.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, PROBE_KEY, probe)
    return model_patcher


def measure_overhead(model, case: Case, repeats: int) -> dict:
    """Three views of what the wrapper adds to T tile calls:

    * direct: patched call / sum of T separate bare calls on the tile crops (best of the runs each);
    * paired: patched call / sum of its own T inner model calls, timed inside the same call by a probe
      wrapper, so that other load on the machine hits numerator and denominator alike;
    * own work: the patched call with an x0-identity stand-in for the model (cut, positions, blend).
    """
    from ...ltx.model import apply_tdp

    x = _latent(case)
    tiles = plan_tiles(case.latent, case.tiling().axes, VIDEO_AXES).tiles
    crops = [x[(..., *t.slices)].contiguous() for t in tiles]
    inner: list[float] = []
    bare = _Caller(model)
    patched = _Caller(_probed(apply_tdp(model, case.tiling()), inner))
    identity = _Caller(_probed(apply_tdp(model, case.tiling()), [], identity=True))
    for _ in range(2):  # warm-up (first calls allocate)
        patched.load()(x)
        bare.load()
        for c in crops:
            bare(c)
    t_patched, t_bare, paired = [], [], []

    def run_patched():
        patched.load()
        inner.clear()
        t = _time(lambda: patched(x))
        t_patched.append(t)
        paired.append(t / sum(inner))

    def run_bare():
        bare.load()
        t_bare.append(sum(_time(lambda c=c: bare(c)) for c in crops))

    for i in range(repeats):  # interleaved, alternating order, so that load on the machine hits both alike
        for run in ((run_patched, run_bare) if i % 2 == 0 else (run_bare, run_patched)):
            run()
    identity.load()(x)
    own = min(_time(lambda: identity(x)) for _ in range(20))
    p, b = min(t_patched), min(t_bare)
    return {"case": case, "n_tiles": len(tiles), "tile_tokens": max(c[0].numel() // 128 for c in crops),
            "patched": p, "bare": b, "ratio": p / b, "paired": statistics.median(paired), "own": own,
            "repeats": repeats}


# -- 2. scaling -----------------------------------------------------------------------------------------------
def measure_scaling(model, case: Case, repeats: int, budget_s: float = 6.0) -> dict:
    from ...ltx.model import apply_tdp

    x = _latent(case)
    bare = _Caller(model)
    patched = _Caller(apply_tdp(model, case.tiling()))
    bare.load()(x), patched.load()(x)
    warm = _time(lambda: patched(x)) + _time(lambda: bare.load()(x))
    repeats = max(repeats, min(15, int(budget_s / max(warm, 1e-3))))  # more runs where they are cheap
    t_bare, t_patched = [], []
    for _ in range(repeats):
        bare.load()
        t_bare.append(_time(lambda: bare(x)))
        patched.load()
        t_patched.append(_time(lambda: patched(x)))
    return {"case": case, "bare": min(t_bare), "patched": min(t_patched), "repeats": repeats}
