"""torch.compile as the tests see it: core's TorchCompileModel applied (inductor), and Dynamo's own counters.

`fresh_dynamo` (a fixture: import it into a test module) resets Dynamo and its counters around each test, so
`graphs()` and `breaks()` count what that test compiled.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def compile_model(comfy: Any, model: Any) -> Any:
    """`model` through core's TorchCompileModel node, backend inductor."""
    (out,) = comfy.run_node("TorchCompileModel", model=model, backend="inductor")
    return out


def graphs() -> int:
    """The graphs Dynamo compiled since the last reset (a recompile adds one)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def breaks() -> Counter:
    """Dynamo's graph breaks since the last reset, by reason."""
    return Counter(dict(torch._dynamo.utils.counters["graph_break"]))
