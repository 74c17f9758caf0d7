"""Core ComfyUI's TorchCompileModel (backend inductor, on the CPU) stacked on the pack's TDP.

What these tests prove, on the tiny 1-layer LTXV (`ltxv` fixture) loaded by ComfyUI's UNETLoader and sampled by a
real KSampler:

* one device: TorchCompileModel before or after the TDP patcher gives the uncompiled 2 x 2 TDP result within fp32
  rounding, and 1 x 1 TDP + compile equals compile alone;
* a 2 x 2 TDP run compiles the plain model's one graph, with no graph break, whatever the number of steps (the
  tiles' shapes repeat every step), and the next prompt compiles nothing more; tiles with their own grid shift
  (positions not normalised) share that graph, the shift an input of it;
* uneven tiles (4 tile shapes) compile at most a graph per shape, the same every step and on the next prompt;
* two presented devices (MultiGPU CFG Split): TDP's tiles over core's deepclones + compile equal one device, and
  compile nothing more for a third step or the next prompt.

HARDWARE MOCK (the multi-device test only): `ltx_tdp_devkit.core_multigpu.fake_devices` makes this CPU report cpu
and cpu:1 to ComfyUI; the deepclones, the thread pool and the compile are real.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.compiled import breaks, compile_model, fresh_dynamo, graphs  # noqa: F401 (fixture)
from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices, has_core_multigpu
from ltx_tdp_devkit.core_multigpu_fixtures import ltxv, one_torch_thread  # noqa: F401 (fixtures)
from ltx_tdp_devkit.ltx_helpers import ksample, patch, randn, tdp_2x2, tiling

ROUNDING = 1e-4
"""Largest abs difference allowed between a compiled and an eager run (inductor fuses and reorders fp32 ops)."""


PLAIN_GRAPHS = 1
"""Graphs dynamo compiles for this model without the pack: one, no break. 2 x 2 TDP compiles the same: its 4 tiles
(5 x 6 cells each) share the graph, and the pack's per-tile state (the grid shift, the keyframe tile) is read from
thread-local state dynamo traces (a ContextVar, before: 12 breaks, 3 graphs and an eager fallback)."""


def _latent() -> dict:
    return {"samples": randn(1, 128, 3, 8, 10, seed=2)}


@pytest.mark.parametrize("order", ["compile_then_tdp", "tdp_then_compile"])
def test_compiled_tdp_equals_eager_tdp(comfy, ltxv, order: str) -> None:
    eager = ksample(comfy, tdp_2x2(ltxv), _latent(), steps=2)
    model = tdp_2x2(compile_model(comfy, ltxv)) if order == "compile_then_tdp" else compile_model(comfy, tdp_2x2(ltxv))
    compiled = ksample(comfy, model, _latent(), steps=2)
    err = (compiled - eager).abs().max().item()
    print(f"{order}: max abs diff {err:.3e}, graphs {graphs()}, breaks {dict(breaks())}")
    assert graphs() >= 1, f"{order}: dynamo compiled nothing, the compile wrapper never ran"
    assert err <= ROUNDING, f"{order}: compiled TDP differs from eager TDP by {err:.3e} (limit {ROUNDING})"


def test_one_tile_tdp_with_compile_equals_compile_alone(comfy, ltxv) -> None:
    alone = ksample(comfy, compile_model(comfy, ltxv), _latent(), steps=2)
    torch._dynamo.reset()
    tdp = ksample(comfy, compile_model(comfy, patch(ltxv, tiling())), _latent(), steps=2)
    err = (tdp - alone).abs().max().item()
    print(f"1x1 + compile vs compile: {err:.3e}")
    assert err <= ROUNDING, f"1 x 1 TDP + compile differs from compile alone by {err:.3e}"


def test_compiled_tdp_adds_no_graph_break_no_graph_and_no_recompile_on_the_next_prompt(comfy, ltxv) -> None:
    """2 x 2 TDP compiled: the plain model's graph count, no graph break, the same for 2 and 3 steps (the tiles'
    shapes repeat every step), and a second prompt on the same compiled model compiles nothing more."""
    ksample(comfy, compile_model(comfy, ltxv), _latent(), steps=2)
    plain_graphs, plain_breaks = graphs(), breaks()
    counts = {}
    for steps in (2, 3):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        model = compile_model(comfy, tdp_2x2(ltxv))
        ksample(comfy, model, _latent(), steps=steps)
        counts[steps] = (graphs(), breaks())
    ksample(comfy, model, _latent(), seed=4, steps=3)  # the next prompt: another seed, the same shapes
    again = (graphs(), breaks())
    print(f"plain: {plain_graphs} graphs, breaks {dict(plain_breaks)}; tdp: "
          f"{ {s: (g, dict(b)) for s, (g, b) in counts.items()} }; next prompt: {again[0]} graphs")
    assert not plain_breaks and plain_graphs == PLAIN_GRAPHS, (
        f"the model compiled without the pack: {plain_graphs} graphs, breaks {dict(plain_breaks)}")
    assert counts[2] == counts[3], f"2x2 TDP compiled {counts[2]} (graphs, breaks) in 2 steps, {counts[3]} in 3"
    tdp_graphs, tdp_breaks = counts[3]
    assert not tdp_breaks, f"graph breaks with the pack: {dict(tdp_breaks)}"
    assert tdp_graphs == plain_graphs, f"2x2 TDP compiled {tdp_graphs} graphs, the plain model {plain_graphs}"
    assert again == counts[3], f"the next prompt compiled more: {again} after {counts[3]}"


def test_the_grid_shift_is_an_input_of_the_compiled_graph_not_a_constant(comfy) -> None:
    """Positions not normalised, or a temporal tile with the causal fix: each tile shifts its grid by its own
    amount. Compiled, the patched patchifier gives every shift's positions exactly as eager does, from one graph
    (the shift a graph input: baked in as a constant, the second tile would get the first tile's positions or a
    recompile per tile)."""
    from comfy.ldm.lightricks.symmetric_patchifier import SymmetricPatchifier

    from ltx_tdp.ltx.model.positions import ShiftedGridPatchifier, shifted_grid

    patchifier = ShiftedGridPatchifier(SymmetricPatchifier(1))
    compiled = torch.compile(lambda x: patchifier.patchify(x)[1], backend="inductor")
    x = randn(1, 8, 2, 4, 5, seed=1)
    for shift in [(0.0, 3.0, 5.0), (0.875, 0.0, 0.0), (2.0, 4.0, 0.0)]:
        with shifted_grid(shift):
            got, want = compiled(x), patchifier.patchify(x)[1]
        assert torch.equal(got, want), f"shift {shift}: compiled positions differ from eager"
        assert float((want - patchifier.patchify(x)[1]).abs().max()) > 0, f"shift {shift} moved nothing"
    assert graphs() == 1 and not breaks(), f"{graphs()} graphs, breaks {dict(breaks())}"


def test_compiled_tdp_over_two_presented_devices_equals_one_device(comfy, ltxv) -> None:
    if not has_core_multigpu():
        pytest.skip("this ComfyUI (0.3.75) has no comfy/multigpu.py (core MultiGPU is 0.24+)")
    single = ksample(comfy, tdp_2x2(ltxv), _latent(), steps=2)
    with fake_devices(2):
        multi = ksample(comfy, cfg_split(tdp_2x2(compile_model(comfy, ltxv)), 2), _latent(), steps=2)
    err = (multi - single).abs().max().item()
    print(f"2 devices + compile vs eager 1 device: {err:.3e}, graphs {graphs()}")
    assert graphs() >= 1, "dynamo compiled nothing over 2 devices"
    assert err <= ROUNDING, f"compiled TDP over 2 devices differs from eager one device by {err:.3e}"


def _tile_shapes(comfy, model, latent: dict) -> set[tuple[int, ...]]:
    """The distinct tile shapes one eager sampling step of `model` (TDP-patched) runs."""
    from ltx_tdp_devkit.ltx_helpers import probe_tile_calls

    calls: list = []
    ksample(comfy, probe_tile_calls(model.clone(), calls), latent, steps=1)
    return {tuple(c["x"].shape) for c in calls}


def test_uneven_tiles_compile_at_most_one_graph_per_tile_shape_once_for_every_step_and_prompt(comfy, ltxv) -> None:
    """A layout whose tiles differ in size (height 9 and width 11 in 2 tiles each, overlap 2: 5 or 6 by 6 or 7
    cells, 4 tile shapes) gives Dynamo the same shapes every step: at most one graph per shape (Dynamo makes a size
    that changed dynamic, so fewer), no more for a third step, none for the next prompt, and no graph break."""
    latent = {"samples": randn(1, 128, 3, 9, 11, seed=2)}
    shapes = _tile_shapes(comfy, tdp_2x2(ltxv), latent)
    assert len(shapes) == 4, f"the layout's tile shapes: {sorted(shapes)}"
    counts = {}
    for steps in (2, 3):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        model = compile_model(comfy, tdp_2x2(ltxv))
        ksample(comfy, model, latent, steps=steps)
        counts[steps] = (graphs(), breaks())
    ksample(comfy, model, latent, seed=4, steps=3)
    again = (graphs(), breaks())
    print(f"uneven 2x2 ({len(shapes)} tile shapes): {counts}; next prompt {again}")
    assert counts[2] == counts[3] == again, f"graphs grew with steps or prompts: {counts}, next prompt {again}"
    assert 1 <= counts[3][0] <= len(shapes) and not counts[3][1], f"{counts[3]} for {len(shapes)} tile shapes"


def test_compiled_tiles_over_two_presented_devices_compile_nothing_more_for_a_third_step_or_the_next_prompt(
        comfy, ltxv) -> None:
    if not has_core_multigpu():
        pytest.skip("this ComfyUI (0.3.75) has no comfy/multigpu.py (core MultiGPU is 0.24+)")
    counts = {}
    with fake_devices(2):
        for steps in (2, 3):
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            model = cfg_split(tdp_2x2(compile_model(comfy, ltxv)), 2)
            ksample(comfy, model, _latent(), steps=steps)
            counts[steps] = (graphs(), breaks())
        ksample(comfy, model, _latent(), seed=4, steps=3)
        again = (graphs(), breaks())
    print(f"2 devices, compiled 2x2: {counts}; next prompt {again}")
    assert counts[3][0] >= 1 and not counts[3][1], f"2 devices: {counts[3]}"
    assert counts[2] == counts[3] == again, f"graphs grew with steps or prompts: {counts}, next prompt {again}"
