"""A model trained for a few steps with the quality benchmark's smoke configuration, shared by the quality and
fusion benchmarks' tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smoke_trained(comfy, tmp_path_factory):
    """SMOKE's model (1 layer, 32 wide, S = 6 cells), trained 3 steps into a fresh cache."""
    from ltx_tdp.bench.quality.config import SMOKE
    from ltx_tdp.bench.quality.train import train

    return train(SMOKE.train, tmp_path_factory.mktemp("quality_cache"), progress=False)
