"""How a model call's equal work units are shared by devices of different speeds (pure arithmetic).

A device of relative speed `s` runs a unit in `1 / s` (ComfyUI's MultiGPU Options give the speeds, relative to
the slowest device). `device_shares` hands out the units so that the last device finishes soonest; `unit_ranges`
turns the counts into the units each device runs (contiguous, in device order); `cond_split` says whether a
call's batch of conds (cond and uncond at cfg > 1) is worth cutting into one unit per cond and tile.
"""

from __future__ import annotations

from collections.abc import Sequence


def device_shares(units: int, speeds: Sequence[float]) -> tuple[int, ...]:
    """Units per device, summing to `units`, that finish soonest: each unit in turn goes to the device that
    would finish it earliest ((its count + 1) / its speed), ties to the earlier device. For equal units this is
    the shortest possible finish time. A device of speed 0 or less gets none.

    Raises ValueError when no device has a positive speed.
    """
    if units < 0:
        raise ValueError(f"a call has at least 0 work units, got {units}")
    usable = [i for i, s in enumerate(speeds) if s > 0]
    if not usable:
        raise ValueError(f"no device has a positive relative speed: {list(speeds)}")
    shares = [0] * len(speeds)
    for _ in range(units):
        best = min(usable, key=lambda i: ((shares[i] + 1) / speeds[i], i))
        shares[best] += 1
    return tuple(shares)


def finish_time(shares: Sequence[int], speeds: Sequence[float], unit_cost: float = 1.0) -> float:
    """When the last device is done: max over devices of its units x `unit_cost` / its speed."""
    return max((n * unit_cost / s for n, s in zip(shares, speeds) if n), default=0.0)


def unit_ranges(shares: Sequence[int]) -> tuple[range, ...]:
    """The units each device runs: device 0 the first `shares[0]`, device 1 the next `shares[1]`, ..."""
    out, start = [], 0
    for n in shares:
        out.append(range(start, start + n))
        start += n
    return tuple(out)


def cond_split(tiles: int, conds: int, speeds: Sequence[float]) -> int:
    """How many slices to cut a call's batch of `conds` conds into: `conds` (one unit per cond and tile, each
    costing 1 / conds of a whole-batch tile) where that finishes strictly sooner on devices of `speeds` than
    one unit per tile with the whole batch, else 1 (fewer, larger calls; the batch as one device runs it)."""
    if conds <= 1:
        return 1
    whole = finish_time(device_shares(tiles, speeds), speeds)
    split = finish_time(device_shares(tiles * conds, speeds), speeds, 1.0 / conds)
    return conds if split < whole * (1 - 1e-9) else 1
