"""The node's APPLY_MODEL wrapper where devices cannot run at once: a step that carries the devices but no
thread pool for every one of them (core's fallback) runs on this device alone, unchanged, and says so once,
rather than waiting in an exchange that the other devices would only join after it."""

from __future__ import annotations

import torch


def test_without_a_thread_pool_the_call_runs_on_one_device_and_says_so_once(comfy, caplog):
    from ltx_tdp.ltx.model.devices import DEVICES_KEY, ModelDevices
    from ltx_tdp.ltx.sequence import patch

    seen = []

    def executor(x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
        seen.append(transformer_options)
        return x * 2

    devices = ModelDevices((torch.device("cpu"), torch.device("cpu", 1)), {}, (1.0, 1.0), None)
    x = torch.ones(1, 4)
    patch._said.clear()
    with caplog.at_level("INFO", logger="ltx_tdp"):
        for _ in range(2):
            out = patch.SequenceModelWrapper()(executor, x, torch.ones(1), None, None, None,
                                               {DEVICES_KEY: devices, "cond_or_uncond": [0]})
            assert torch.equal(out, x * 2)
    assert len(seen) == 2 and all(DEVICES_KEY not in o and o["cond_or_uncond"] == [0] for o in seen), seen
    assert caplog.text.count("no MultiGPU thread pool") == 1, caplog.text
