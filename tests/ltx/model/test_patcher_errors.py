"""The TDP patcher on a real ComfyUI with a tiny real LTXV model: what stops or warns a run. A refused layout
or model with a message that says what to change, an interrupt between tiles, the drift warning at a high first
sigma.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import PROBE_KEY, call_model, ksample, load_ltxv, patch, randn, tiling


def test_refused_layout_names_the_axis_and_the_largest_valid_overlap(comfy, model_names):
    from ltx_tdp.tiling import TilingError

    model = patch(load_ltxv(comfy, model_names), tiling(width=(3, 8)))
    with pytest.raises(TilingError, match=r"width: 21 latent cells cannot take 3 tiles with overlap 8; "
                                          r"the largest overlap that keeps the blend exact is 5"):
        call_model(model, randn(1, 128, 1, 4, 21), 0.5)


def test_a_model_that_is_not_ltx_is_refused_when_patching(comfy):
    from ltx_tdp.ltx.errors import UnsupportedInput

    class NotLTX:
        model = type("M", (), {"diffusion_model": torch.nn.Linear(2, 2)})()

    with pytest.raises(UnsupportedInput, match="needs an LTX-Video or LTX-2 model; this MODEL is Linear"):
        patch(NotLTX(), tiling())


def test_an_interrupt_stops_sampling_between_tiles(comfy, model_names):
    import comfy.model_management as mm

    model = patch(load_ltxv(comfy, model_names), tiling(height=(2, 2), width=(2, 2)))
    calls: list = []
    import comfy.patcher_extension as ext

    def interrupt_after_first_tile(executor, *args, **kwargs):
        calls.append(1)
        mm.interrupt_current_processing(True)  # what the UI's Cancel button sets
        return executor(*args, **kwargs)

    model.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, PROBE_KEY, interrupt_after_first_tile)
    try:
        with pytest.raises(mm.InterruptProcessingException):
            ksample(comfy, model, {"samples": randn(1, 128, 2, 10, 10)}, steps=3)
    finally:
        mm.interrupt_current_processing(False)
    assert len(calls) == 1, f"{len(calls)} tiles ran after the interrupt was raised"


def test_a_high_first_sigma_warns_that_tiles_can_drift(comfy, model_names, caplog):
    model = patch(load_ltxv(comfy, model_names), tiling(width=(2, 2)))
    latent = {"samples": randn(1, 128, 2, 4, 8)}
    with caplog.at_level("WARNING", logger="ltx_tdp"):
        ksample(comfy, model, latent, steps=2, denoise=0.05)  # first sigma well below 0.8 after the shift
    assert not [r for r in caplog.records if "drift" in r.getMessage()], "warned at a low first sigma"
    with caplog.at_level("WARNING", logger="ltx_tdp"):
        ksample(comfy, model, latent, steps=2, denoise=1.0)
    warnings = [r.getMessage() for r in caplog.records if "drift" in r.getMessage()]
    assert warnings and "first sigma is 1.000" in warnings[0], warnings
