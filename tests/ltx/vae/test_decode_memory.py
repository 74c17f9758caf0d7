"""The tiled decode's own memory accounting (`TiledDecode.memory`, ltx/vae/memory.py) against what it holds, and what
it says for a 4K clip on a 24 GB and a 12 GB card.

On the CPU every tensor of the decode is a CPU tensor, so the live-tensor meter (ltx_tdp_devkit.memory) sees the
device's share (the decoder's working set, the pack's buffers) and the system memory's (the frames) together: the
estimate must bound their sum and not overstate it by more than ESTIMATE_SLACK. Mocked: the device's total memory
(`comfy.model_management.get_total_memory`, a device memory figure; 6 GiB makes ComfyUI's conv decoder stream time
in its smallest chunks, 32 MiB, so the tiny decoder streams too).
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.memory import PeakTensorBytes
from ltx_tdp_devkit.real_vae import CARD_GIB, CARD_SETTINGS, RESERVE_GIB, accounting_vae
from ltx_tdp_devkit.vae_helpers import latent, settings, tiled

ESTIMATE_SLACK = 1.6
"""The estimate is at most this many times the tracked peak (measured on ComfyUI 0.33.0: 1.10 to 1.23)."""
MIB = 2**20


@pytest.fixture
def small_device(comfy, monkeypatch):
    """A 6 GiB device as ComfyUI's memory queries see it (the mock named in the module docstring)."""
    import comfy.model_management as mm

    monkeypatch.setattr(mm, "get_total_memory", lambda dev=None, torch_total_too=False:
                        (6 * 2**30,) * 2 if torch_total_too else 6 * 2**30)


def _tracked_and_estimated(vae, x, **kw) -> tuple[int, int, str]:
    from ltx_tdp.ltx.vae.decoder import prepare_decode

    tiled(vae, x[:, :, :2, :2, :2], spatial_tile=4096)  # warm up: first-call allocations are not the decode's
    memory = prepare_decode(vae, x, settings(**kw)).memory()
    meter = PeakTensorBytes()
    with meter:
        tiled(vae, x, **kw)
    estimate = memory.work + memory.host
    words = f"tracked {meter.peak / MIB:.1f} MiB, estimated {estimate / MIB:.1f} MiB ({memory.describe()})"
    return meter.peak, estimate, words


@pytest.mark.parametrize("layout", [dict(spatial_tile=4096), dict(spatial_tile=512, context=5),
                                    dict(spatial_tile=256, temporal_tile=16, context=5)],
                         ids=["one-tile", "2x2-tiles", "chunks-and-tiles"])
def test_the_conv_decodes_tracked_peak_stays_within_its_own_estimate(vae, small_device, layout):
    # 32 x 32 cells make the last level of the tiny decoder outgrow ComfyUI's smallest chunk, so time is streamed;
    # a ComfyUI that does not stream (0.3.x, where the tiny config builds 128-channel levels) gets 12 x 12.
    side = 32 if getattr(vae.first_stage_model, "comfy_has_chunked_io", False) else 12
    x = latent(5 if "temporal_tile" in layout else 3, side, side, seed=1)
    tracked, estimated, words = _tracked_and_estimated(vae, x, **layout)
    assert tracked <= estimated <= ESTIMATE_SLACK * tracked, words


@pytest.mark.parametrize("layout", [dict(spatial_tile=64, temporal_tile=16), dict(spatial_tile=4096)],
                         ids=["tiles-and-chunks", "one-tile"])
def test_the_diffusion_decodes_tracked_peak_stays_within_its_own_estimate(comfy, layout):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    tracked, estimated, words = _tracked_and_estimated(dv.load(seed=1), latent(4, 4, 4, seed=9), **layout)
    assert tracked <= estimated <= ESTIMATE_SLACK * tracked, words


@pytest.mark.parametrize("card", CARD_GIB)
@pytest.mark.parametrize("model", ["LTX-2", "LTX-2.5"])
def test_a_4k_clip_fits_the_card_at_its_settings_by_the_packs_accounting(comfy, model, card):
    """The node's defaults on a 24 GB card, docs/vae-decode.md's 12 GB setting on a 12 GB one: the VAE's weights
    (bf16, published configuration) + the largest tile's decode + the pack's buffers, on ComfyUI's chunk for
    that card; the frames (fp32) are system memory."""
    from ltx_tdp_devkit.tiny_models import has_ltxav

    if model == "LTX-2.5" and not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    if not has_ltxav():  # ComfyUI 0.3.x: no LTX-2, and a conv decoder that does not stream time
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no LTX-2 (comfy.ldm.lightricks.av_model)")
    from ltx_tdp.ltx.vae import DecodeSettings
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.tiling import LTX_GEOMETRY

    cells = LTX_GEOMETRY.latent_shape(121, 2176, 3840)
    decode = prepare_decode(accounting_vae(model), torch.zeros(1, 128, *cells),
                            DecodeSettings(**CARD_SETTINGS[(model, card)]))
    memory = decode.memory(CARD_GIB[card] * 2**30)
    budget = (CARD_GIB[card] - RESERVE_GIB) * 2**30
    assert memory.device_peak <= budget, f"{model} on {card}: {memory.describe()}; tiles {decode.plan.pixels.counts}"
    assert memory.host >= 4 * 3 * 121 * 2176 * 3840, f"the frames are not counted in system memory: {memory.describe()}"


def test_the_diffusion_decoder_draws_its_noise_only_after_comfyui_made_room_for_it(comfy, monkeypatch):
    """The noise field (on a GPU: 6 GB at 4K in bf16, drawn where ComfyUI draws it) is drawn once ComfyUI has loaded
    the VAE with room for it, not while the sampler's model still fills the device. Recorded: what ComfyUI's
    `load_models_gpu` is asked (a spy; the call goes through)."""
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    import comfy.model_management as mm
    from ltx_tdp.ltx.vae.decoder import prepare_decode

    vae, x = dv.load(seed=1), latent(3, 2, 4, seed=9)
    decode = prepare_decode(vae, x, settings(spatial_tile=64, temporal_tile=16))
    assert decode.noise is None, "the noise field was drawn while the decode was only planned"
    asked, load = [], mm.load_models_gpu

    def spy(models, memory_required=0, **kw):
        asked.append((memory_required, decode.noise is None))
        return load(models, memory_required=memory_required, **kw)

    monkeypatch.setattr(mm, "load_models_gpu", spy)
    memory = decode.memory()
    decode.load()
    noise_bytes = decode.noise.numel() * decode.noise.element_size()
    assert asked and asked[0][1], f"ComfyUI was asked {asked} after the noise field was drawn"
    assert asked[0][0] >= memory.draw == noise_bytes, \
        f"asked for {asked[0][0]} bytes beside the weights; the noise field takes {noise_bytes}"
    assert decode.noise.device.type == "cpu", f"the noise field stays on {decode.noise.device}"
