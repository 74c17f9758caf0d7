"""The decode's quality presets: the context each gives, never beyond the decoder's reach."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.vae_helpers import reach_cells


def test_the_quality_presets_set_the_context_and_never_exceed_the_reach(vae):
    from ltx_tdp.ltx.vae import DecodeSettings, VaeDecodeError
    from ltx_tdp.ltx.vae.decoder import decode_context
    from ltx_tdp.ltx.vae.settings import QUALITY_PRESETS

    time_reach, space_reach = reach_cells(vae)
    got = {p.name: decode_context(vae, DecodeSettings(quality=p.name, context_cells=3)) for p in QUALITY_PRESETS}
    assert got["exact"] == (time_reach, space_reach), f"exact: {got['exact']}, reach {time_reach}/{space_reach}"
    assert got["custom"] == (3, 3), f"custom with context_cells 3: {got['custom']}"
    assert all(t <= time_reach and s <= space_reach for t, s in got.values() if (t, s) != (3, 3)), got
    with pytest.raises(VaeDecodeError, match="unknown decode quality 'best'"):
        DecodeSettings(quality="best")
