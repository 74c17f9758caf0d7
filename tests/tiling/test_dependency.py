"""tiling.dependency against a brute-force simulation: for random stacks of neighbourhoods (shifted inward at
the edges), convolutions (clamped at the edges), upsamplers (with and without a dropped first output), end pads and
end crops, `needed` is exactly the set of input positions that outputs read, and a block cut to it computes those
outputs as the full grid does; `dependents` and `axis_reach` are what the simulation says reads an input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling import AxisScale
from ltx_tdp.tiling.dependency import (Conv, CropEnd, Neighbourhood, PadEnd, Upsample, axis_reach, computed,
                                        dependents, lengths, needed)


def _reads(op, n: int, j: int) -> set[int]:
    """The input positions output j of `op` reads on a grid of n, straight from the op's definition."""
    if isinstance(op, Neighbourhood):
        k = min(op.kernel, n)
        start = min(max(j - k // 2, 0), n - k)
        return set(range(start, start + k))
    if isinstance(op, Upsample):
        return {(j + op.drop) // op.stride}
    if isinstance(op, PadEnd):
        return {min(j, n - 1)}
    if isinstance(op, Conv):
        return set(range(max(j - op.before, 0), min(j + op.after, n - 1) + 1))
    return {j}


def _simulate(ops, n: int, outputs: set[int]) -> set[int]:
    sizes = lengths(ops, n)
    for op, size in zip(reversed(ops), reversed(sizes[:-1])):
        outputs = set().union(*(_reads(op, size, j) for j in outputs))
    return outputs


def _block_values(ops, n: int, lo: int, hi: int) -> dict[int, frozenset]:
    """Run the stack on the block [lo, hi] alone (its own grid, dropping/padding as `computed` says) with
    symbolic values (the set of inputs each position saw); keyed by full-grid position."""
    spans = computed(ops, n, lo, hi)
    values = [frozenset({i}) for i in range(lo, hi + 1)]
    for k, op in enumerate(ops):
        start, m = spans[k][0], len(values)
        if isinstance(op, (Neighbourhood, Conv)):
            values = [frozenset().union(*(values[i] for i in _reads(op, m, j))) for j in range(m)]
        elif isinstance(op, Upsample):
            drop = op.drop if start == 0 else 0  # a block drops only where it holds the origin
            values = [values[(j + drop) // op.stride] for j in range(m * op.stride - drop)]
        elif isinstance(op, PadEnd):
            values = values + ([values[-1]] * op.count if spans[k][1] == lengths(ops, n)[k] - 1 else [])
        else:
            keep = spans[k + 1][1] - spans[k + 1][0] + 1
            values = values[:keep]
        assert len(values) == spans[k + 1][1] - spans[k + 1][0] + 1, f"block length after {op}"
    return {spans[-1][0] + j: v for j, v in enumerate(values)}


ops_strategy = st.lists(st.one_of(
    st.builds(Neighbourhood, st.integers(1, 7)),
    st.builds(Upsample, st.integers(1, 3), st.just(0)),
    st.builds(Upsample, st.just(2), st.just(1)),
), min_size=1, max_size=6)

conv_strategy = st.lists(st.one_of(
    st.builds(Conv, st.integers(0, 3), st.integers(0, 3)),
    st.builds(Upsample, st.integers(1, 3), st.just(0)),
    st.builds(Upsample, st.just(2), st.just(1)),
), min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(st.one_of(ops_strategy, conv_strategy), st.integers(0, 2), st.integers(3, 12), st.data())
def test_needed_is_the_simulated_dependency_and_a_block_cut_to_it_computes_the_full_grids_outputs(
        ops, pad, n, data):
    ops = ([PadEnd(pad)] if pad else []) + ops
    total = lengths(ops, n)[-1]
    if pad:
        crop = data.draw(st.integers(0, min(pad, total - 1)))
        ops, total = ops + [CropEnd(crop)], total - crop
    lo = data.draw(st.integers(0, total - 1))
    hi = data.draw(st.integers(lo, total - 1))
    want = _simulate(ops, n, set(range(lo, hi + 1)))
    a, b = needed(ops, n, lo, hi)
    assert set(range(a, b + 1)) >= want and {a, b} <= want, f"needed [{a}, {b}], simulated {sorted(want)}"
    full = _block_values(ops, n, 0, n - 1)
    block = _block_values(ops, n, a, b)
    for j in range(lo, hi + 1):
        assert block[j] == full[j], (f"{ops}: output {j} of block [{a}, {b}] saw {sorted(block[j])}, "
                                     f"full {sorted(full[j])}")


@settings(max_examples=200, deadline=None)
@given(st.one_of(ops_strategy, conv_strategy), st.integers(3, 12), st.data())
def test_the_dependents_of_an_input_are_the_outputs_whose_simulated_dependency_holds_it(ops, n, data):
    position = data.draw(st.integers(0, n - 1))
    want = [j for j in range(lengths(ops, n)[-1]) if position in _simulate(ops, n, {j})]
    first, last = dependents(ops, n, position)
    assert list(range(first, last + 1)) == want, f"{ops}: dependents [{first}, {last}] of {position}, simulated {want}"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from([1, 2])), min_size=1, max_size=4),
       st.booleans())
def test_the_axis_reach_is_the_simulated_dependency_of_a_middle_cells_pixels(layers, causal):
    """Stacks shaped like LTX's conv decoders: convolutions, each followed by an upsampler (in a causal axis a
    stride-2 upsampler drops its first output)."""
    ops = []
    for before, after, stride in layers:
        ops += [Conv(before, after), Upsample(stride, 1 if causal and stride == 2 else 0)]
    cells = 40
    got = axis_reach(ops, causal, cells)
    factor = 1
    for _, _, stride in layers:
        factor *= stride
    cell = cells // 2
    owned = AxisScale(factor, causal).owned_pixels(cell, cell + 1)
    reads = [_simulate(ops, cells, {p}) for p in range(lengths(ops, cells)[-1])]
    touched = [p for p, r in enumerate(reads) if cell in r]
    want = (cell - min(reads[owned.start]), max(reads[owned.end - 1]) - cell, owned.start - touched[0],
            touched[-1] - (owned.end - 1))
    assert (got.before, got.after, got.pixels_before, got.pixels_after) == want, f"{ops}: {got}, simulated {want}"
