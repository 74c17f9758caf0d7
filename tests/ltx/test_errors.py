"""What the LTX layer refuses that is not a tile layout: its own error type, whose class name and message read as a
sentence in ComfyUI's error dialog, apart from TilingError (layouts) and still a ValueError."""

from __future__ import annotations

import pytest


def test_an_unknown_audio_mode_is_an_unsupported_input_naming_the_modes():
    from ltx_tdp.ltx.errors import UnsupportedInput
    from ltx_tdp.ltx.model.audio import audio_mode

    with pytest.raises(UnsupportedInput, match="unknown audio_mode 'loud'; choose one of held, average"):
        audio_mode("loud")
    assert audio_mode("frozen (stage-1 audio, recommended)") == "held", "a label older workflows saved must still load"


def test_the_refusals_that_are_not_layouts_are_not_tiling_errors_and_the_decodes_are_among_them():
    from ltx_tdp.ltx.errors import UnsupportedInput, VaeDecodeError
    from ltx_tdp.tiling import TilingError

    assert issubclass(UnsupportedInput, ValueError) and not issubclass(UnsupportedInput, TilingError), \
        f"UnsupportedInput's bases: {UnsupportedInput.__mro__}"
    assert issubclass(VaeDecodeError, UnsupportedInput), f"VaeDecodeError's bases: {VaeDecodeError.__mro__}"
