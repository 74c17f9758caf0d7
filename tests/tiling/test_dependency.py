"""tiling.dependency against a brute-force simulation: for random stacks of windows (shifted inward at the
edges), upsamplers (with and without a dropped first output), end pads and end crops, `needed` is exactly the
set of input positions that outputs read, and a block cut to it computes those outputs as the full grid does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling.dependency import CropEnd, PadEnd, Upsample, Window, computed, lengths, needed


def _reads(op, n: int, j: int) -> set[int]:
    """The input positions output j of `op` reads on a grid of n, straight from the op's definition."""
    if isinstance(op, Window):
        k = min(op.kernel, n)
        start = min(max(j - k // 2, 0), n - k)
        return set(range(start, start + k))
    if isinstance(op, Upsample):
        return {(j + op.drop) // op.stride}
    if isinstance(op, PadEnd):
        return {min(j, n - 1)}
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
        if isinstance(op, Window):
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
    st.builds(Window, st.integers(1, 7)),
    st.builds(Upsample, st.integers(1, 3), st.just(0)),
    st.builds(Upsample, st.just(2), st.just(1)),
), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(ops_strategy, st.integers(0, 2), st.integers(3, 12), st.data())
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
