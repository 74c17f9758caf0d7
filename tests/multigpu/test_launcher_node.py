"""The launcher node: schema, settings it resolves, and a group that is reused while settings are equal."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.distributed


def _node():
    from ltx_tdp.nodes.multigpu_launcher import MultiGPULauncherNode

    return MultiGPULauncherNode


def test_every_input_has_a_tooltip_and_the_output_is_a_tdp_group(comfy):
    schema = _node().define_schema()
    missing = [i.id for i in schema.inputs if not getattr(i, "tooltip", None)]
    assert not missing, f"inputs without a tooltip: {missing}"
    assert schema.node_id == "LTXTDPMultiGPULauncher"
    assert [o.io_type for o in schema.outputs] == ["LTX_TDP_GROUP"]


def test_auto_on_the_cpu_gives_gloo_ranks_reused_across_runs(comfy):
    inputs = dict(ranks=2, devices="", backend="auto", timeout_s=20, address="127.0.0.1", port=0)
    (group,) = comfy.run_node(_node(), **inputs)
    assert group.rank_count == 2
    assert group.settings.devices == ("cpu", "cpu") and group.settings.backend == "gloo", group.settings
    session = group.session()
    (again,) = comfy.run_node(_node(), **inputs)
    assert again is group and again.session() is session, "equal settings did not reuse the running group"


@pytest.mark.parametrize("devices, message", [
    ("cuda:0,banana", "not a device"),
])
def test_a_bad_device_list_is_refused_with_a_clear_message(comfy, devices, message):
    from ltx_tdp.multigpu.settings import TDPGroupError

    with pytest.raises(TDPGroupError, match=message):
        comfy.run_node(_node(), ranks=2, devices=devices, backend="auto", timeout_s=20, address="127.0.0.1", port=0)


def test_external_workers_need_a_fixed_port(comfy):
    from ltx_tdp.multigpu.settings import TDPGroupError

    with pytest.raises(TDPGroupError, match="fixed port"):
        comfy.run_node(_node(), ranks=2, devices="", backend="gloo", timeout_s=20, address="127.0.0.1", port=0,
                       external_workers=True)
