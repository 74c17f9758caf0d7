"""The report's decisions: where tiles drift apart (the patcher's warning sigma) and the hypothesis verdicts."""

from __future__ import annotations

import dataclasses

from ltx_tdp.bench.quality.config import BenchConfig, Case
from ltx_tdp.bench.quality.methods import METHODS
from ltx_tdp.bench.quality.report import drift_onset, verdicts
from ltx_tdp.bench.quality.sweep import Results, Row

CFG = dataclasses.replace(BenchConfig(), first_sigmas=(0.4, 0.6, 0.8), steps=(2,), overlaps=(5,), tilings=((2, 2),),
                          default=Case(first_sigma=0.6))


def _results(drift: dict[float, float], tdp_band: float = 30.0) -> Results:
    results = Results()
    for case in CFG.cases():
        results.reference_seam[case] = 1.0
        for m in METHODS:
            results.rows.append(Row(case, m, 0, psnr=30.0, psnr_band=tdp_band if m == "tdp" else 30.0,
                                    psnr_interior=30.0, seam=1.0, psnr_vs_full=40.0, psnr_band_vs_full=40.0,
                                    disagreement=drift[case.first_sigma] if m in ("blend_at_end", "no_overlap") else None))
    return results


def test_drift_onset_is_the_interpolated_crossing_rounded_down():
    onset, table = drift_onset(CFG, _results({0.4: 0.05, 0.6: 0.08, 0.8: 0.16}))
    # 0.08 -> 0.16 between 0.6 and 0.8 crosses 0.10 at 0.6 + 0.2 * 0.02 / 0.08 = 0.65
    assert onset == 0.65, (onset, table)


def test_drift_onset_at_the_ends_of_the_sweep():
    assert drift_onset(CFG, _results({0.4: 0.2, 0.6: 0.3, 0.8: 0.4}))[0] == 0.4
    assert drift_onset(CFG, _results({0.4: 0.01, 0.6: 0.02, 0.8: 0.03}))[0] == 0.8


def test_verdicts_call_a_tie_a_tie_and_a_loss_a_loss():
    tie = "\n".join(verdicts(CFG, _results({0.4: 0, 0.6: 0, 0.8: 0}, tdp_band=30.01)))
    assert "(tie)" in tie and "FAILS" not in tie, tie
    loss = "\n".join(verdicts(CFG, _results({0.4: 0, 0.6: 0, 0.8: 0}, tdp_band=29.0)))
    assert "FAILS" in loss, loss
