"""Where the test suite's time goes: each CI lane's wall time, its tests, and its 25 slowest tests.

    python3 scripts/test_times.py                 # runs `bash .ci/run` (every lane, as CI runs them; its output on
                                                  # stderr), then prints the report on stdout
    python3 scripts/test_times.py --reports DIR   # reports on the files a run with LTX_TDP_CI_REPORTS=DIR left

With LTX_TDP_CI_REPORTS set, `.ci/run` has each lane's pytest write a JUnit report whose test times are the test
bodies alone (`junit_duration_report=call`), and the lane's wall time beside it. Per lane this prints the wall time
(the environment included), the time in test bodies, and the rest: starting servers, worker groups and processes,
building models (fixture set-up and tear-down), collection and set-up of the environment. Markdown, for
docs/development.md. Pure Python (the standard library): run it with any python3.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ltx_tdp.test_times")

ROOT = Path(__file__).resolve().parents[1]
LANES = {1: "ComfyUI 0.33.0", 2: "ComfyUI 0.24.0", 3: "ComfyUI 0.3.75"}
SLOWEST = 25


@dataclass(frozen=True)
class TestTime:
    lane: int
    test: str
    seconds: float


@dataclass(frozen=True)
class Lane:
    number: int
    wall: float
    """Seconds of the lane's whole test command (environment, collection, fixtures, tests)."""
    session: float
    """Seconds pytest reports for the session."""
    tests: tuple[TestTime, ...]
    collected: int
    skipped: int
    failed: int

    @property
    def in_tests(self) -> float:
        return sum(t.seconds for t in self.tests)


def read_lane(reports: Path, number: int) -> Lane | None:
    """The lane `number` of a run whose reports are in `reports` (None where it left no report)."""
    xml, seconds = reports / f"run{number}.xml", reports / f"run{number}.seconds"
    if not xml.is_file():
        return None
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests, collected, skipped, failed, session = [], 0, 0, 0, 0.0
    for suite in suites:
        collected += int(suite.get("tests", 0))
        skipped += int(suite.get("skipped", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        session += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            tests.append(TestTime(number, name, float(case.get("time", 0.0))))
    wall = float(seconds.read_text().strip()) if seconds.is_file() else session
    return Lane(number, wall, session, tuple(tests), collected, skipped, failed)


def report(lanes: list[Lane]) -> str:
    """The markdown tables: one row per lane, then each lane's slowest test bodies."""
    out = ["| lane | wall (min) | pytest session (min) | in test bodies (min) | outside them (min) | tests | "
           "skipped | failed |", "|---|---|---|---|---|---|---|---|"]
    for lane in lanes:
        out.append(f"| {LANES.get(lane.number, lane.number)} | {lane.wall / 60:.1f} | {lane.session / 60:.1f} | "
                   f"{lane.in_tests / 60:.1f} | {(lane.wall - lane.in_tests) / 60:.1f} | {lane.collected} | "
                   f"{lane.skipped} | {lane.failed} |")
    for lane in lanes:
        out += ["", f"{LANES.get(lane.number, lane.number)}: the {SLOWEST} slowest test bodies", "",
                "| s | test |", "|---|---|"]
        for t in sorted(lane.tests, key=lambda t: -t.seconds)[:SLOWEST]:
            out.append(f"| {t.seconds:.1f} | `{t.test}` |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, help="report on this folder of an earlier run instead of running CI")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    reports = args.reports
    if reports is None:
        reports = Path(tempfile.mkdtemp(prefix="ltx-tdp-times."))
        log.info("running bash .ci/run, reports in %s", reports)
        rc = subprocess.call(["bash", ".ci/run"], cwd=ROOT, env={**os.environ, "LTX_TDP_CI_REPORTS": str(reports)},
                             stdout=sys.stderr)  # CI's own output on stderr, the report alone on stdout
        log.info(".ci/run ended with status %d", rc)
    lanes = [lane for n in LANES if (lane := read_lane(reports, n)) is not None]
    if not lanes:
        log.error("no lane report in %s", reports)
        return 1
    sys.stdout.write(report(lanes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
