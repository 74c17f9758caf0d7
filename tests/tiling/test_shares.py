"""Work units shared by devices of different speeds: whole counts that finish soonest, contiguous ranges, and
when a cond batch is worth cutting apart."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltx_tdp.tiling.shares import cond_split, device_shares, finish_time, unit_ranges


def test_equal_devices_share_equally_and_the_first_takes_the_remainder():
    assert device_shares(4, [1.0, 1.0]) == (2, 2), device_shares(4, [1.0, 1.0])
    assert device_shares(4, [1.0, 1.0, 1.0]) == (2, 1, 1), device_shares(4, [1.0, 1.0, 1.0])
    assert device_shares(1, [1.0, 1.0]) == (1, 0), device_shares(1, [1.0, 1.0])


def test_a_device_three_times_as_fast_runs_three_times_as_many_units():
    assert device_shares(4, [1.0, 3.0]) == (1, 3), device_shares(4, [1.0, 3.0])
    assert device_shares(8, [3.0, 1.0]) == (6, 2), device_shares(8, [3.0, 1.0])


def test_a_device_of_speed_zero_runs_nothing_and_no_positive_speed_is_refused():
    assert device_shares(5, [1.0, 0.0, 1.0]) == (3, 0, 2), device_shares(5, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="positive relative speed"):
        device_shares(3, [0.0, 0.0])


@settings(max_examples=200, deadline=None)
@given(units=st.integers(0, 9), speeds=st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]), min_size=1, max_size=3))
def test_the_shares_sum_to_the_units_and_no_other_split_finishes_sooner(units, speeds):
    shares = device_shares(units, speeds)
    assert sum(shares) == units, f"{units} units over {speeds}: shares {shares}"
    best = min(finish_time(split, speeds) for split in itertools.product(range(units + 1), repeat=len(speeds))
               if sum(split) == units)
    got = finish_time(shares, speeds)
    assert got <= best + 1e-12, f"{units} units over {speeds}: {shares} finishes at {got}, {best} is possible"


def test_unit_ranges_are_contiguous_in_device_order():
    assert unit_ranges((2, 0, 3)) == (range(0, 2), range(2, 2), range(2, 5)), unit_ranges((2, 0, 3))


def test_a_cond_batch_is_cut_only_where_that_finishes_sooner():
    assert cond_split(4, 2, [1.0, 1.0]) == 1, "4 tiles on 2 devices: whole-batch units are as fast"
    assert cond_split(1, 2, [1.0, 1.0]) == 2, "1 tile on 2 devices: one unit per cond halves the time"
    assert cond_split(4, 2, [1.0, 1.0, 1.0]) == 2, "4 tiles on 3 devices: 8 half units finish at 1.5, not 2"
    assert cond_split(4, 1, [1.0, 1.0, 1.0]) == 1, "one cond (cfg 1) is never cut"
