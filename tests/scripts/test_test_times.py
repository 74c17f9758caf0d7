"""`scripts/test_times.py` reads what a CI lane's pytest writes with LTX_TDP_CI_REPORTS set (a JUnit report whose
times are the test bodies alone, and the lane's wall time): here a real pytest run of a small suite whose fixture
set-up (a stand-in for starting a server) takes longer than the test bodies. The report puts the set-up outside the
test bodies and lists the slowest body first."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from ltx_tdp_devkit.paths import PACK_ROOT

SUITE = '''
import time
import pytest

@pytest.fixture(scope="module")
def server():
    time.sleep(0.6)  # starting a server

def test_slow_body(server):
    time.sleep(0.3)

def test_quick_body(server):
    time.sleep(0.05)

def test_skipped():
    pytest.skip("not here")
'''


def _times():
    spec = importlib.util.spec_from_file_location("test_times", PACK_ROOT / "scripts" / "test_times.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_times"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_report_separates_test_bodies_from_set_up_and_lists_the_slowest_first(tmp_path: Path):
    times = _times()
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_suite.py").write_text(SUITE)
    reports = tmp_path / "reports"
    reports.mkdir()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "suite"),
                    f"--junitxml={reports / 'run1.xml'}", "-o", "junit_duration_report=call"],
                   check=True, cwd=tmp_path, capture_output=True)
    (reports / "run1.seconds").write_text("60\n")

    lane = times.read_lane(reports, 1)
    assert (lane.collected, lane.skipped, lane.failed) == (3, 1, 0), lane
    assert 0.35 <= lane.in_tests < 0.6, f"test bodies took {lane.in_tests:.2f} s: the fixture's set-up was counted"
    assert lane.session >= lane.in_tests + 0.6, f"the session ({lane.session:.2f} s) lacks the set-up"
    assert lane.wall == 60.0
    text = times.report([lane])
    rows = [line for line in text.splitlines() if "test_suite.py::" in line]
    assert "test_slow_body" in rows[0] and "test_quick_body" in rows[1], text
    assert "| ComfyUI 0.33.0 | 1.0 |" in text, text
    assert times.read_lane(reports, 2) is None
