"""`ltx.device_ranks.DeviceRanks` without ComfyUI's thread pool: the calling thread runs every device's units, each
device's with that device current, as core's MultiGPU fallback does (`set_torch_device`).

HARDWARE MOCK: a CPU has no current device, and ComfyUI's `set_torch_device` does nothing for one. The test
replaces `comfy.model_management.set_torch_device`, for its own duration only, by a recording of the device it
is given; the devices are torch.device("cpu") and torch.device("cpu", 1) (dict keys of their own).
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def current_device(comfy, monkeypatch):
    """[the current device of this thread] kept by a recording set_torch_device (see the module docstring)."""
    import comfy.model_management as mm

    if not hasattr(mm, "set_torch_device"):
        pytest.skip("this ComfyUI has no set_torch_device (no in-process MultiGPU)")
    current: list[torch.device | None] = [None]
    monkeypatch.setattr(mm, "set_torch_device", lambda device: current.__setitem__(0, device))
    return current


class _Job:
    """Each unit's partial is `unit` in every element; records the device current while each unit runs."""

    def __init__(self, current: list) -> None:
        self.current = current
        self.ran: list[tuple[torch.device, int, torch.device | None]] = []

    def partial_on(self, device: torch.device):
        def partial(unit: int, world: int, before):
            before(None)
            self.ran.append((device, unit, self.current[0]))
            return torch.full((3,), float(unit), dtype=torch.float64)

        return partial


def test_without_a_pool_each_devices_units_run_with_that_device_current(current_device):
    from ltx_tdp.ltx.device_ranks import DeviceRanks, DeviceShare

    here, other = torch.device("cpu"), torch.device("cpu", 1)
    job = _Job(current_device)
    current_device[0] = here
    ranks = DeviceRanks([DeviceShare(here, range(0, 2)), DeviceShare(other, range(2, 5))], pool=None)
    total = ranks.reduce(job, job.partial_on(here))
    assert torch.equal(total, torch.full((3,), 10.0, dtype=torch.float64)), f"the sum of units 0..4 is {total}"
    wrong = [(device, unit, current) for device, unit, current in job.ran if current != device]
    assert not wrong, f"units ran with another device current (device, unit, current): {wrong}"
    assert current_device[0] == here, f"after the call {current_device[0]} is current, not this device {here}"
