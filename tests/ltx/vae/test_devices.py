"""The tiled decode over this process's devices (`ltx.vae.devices`, `DeviceRanks.gather`) on the tiny real LTX VAEs
(ComfyUI's own VideoVAE and LTX-2.5's CausalDiffusionVAE, loaded by comfy.sd.VAE): 2 and 3 devices give the one-device
decode bit for bit, each device's replica is loaded by ComfyUI, what another device runs holds at most the decode's
estimate, a failing device names itself, Cancel stops every device, no pool thread outlives the decode, and the next
decode runs.

HARDWARE MOCK: a CPU machine has one torch device, so `fake_devices(n)` (ltx_tdp_devkit.core_multigpu) makes
ComfyUI's device enumeration report cpu, cpu:1, ...; only the enumeration is mocked: the replicas, ComfyUI's model
management and its MultiGPUThreadPool are real.
"""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

from ltx_tdp_devkit import diffusion_vae as dv
from ltx_tdp_devkit.core_multigpu import SKIP_REASON, cpu_devices, fake_devices, has_core_multigpu
from ltx_tdp_devkit.vae_helpers import latent, settings

OVERLAPPING = dict(spatial_tile=96, spatial_overlap=32)
"""Small tiles that overlap: pixels where up to four tiles add up, so the order of the blend shows in the bits."""


@pytest.fixture
def pool(comfy):
    """Where ComfyUI has its MultiGPUThreadPool (0.24 on; older ComfyUI runs every device's tiles in the calling
    thread, still bit for bit)."""
    if not has_core_multigpu():
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")


@pytest.fixture(scope="module")
def dvae(comfy):
    if not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    return dv.load(seed=1)


def _decode(vae, x, n: int | None = None, progress=None, **kw):
    from ltx_tdp.ltx.vae import decode_tiled
    from ltx_tdp.ltx.vae.devices import decode_devices

    if not n:
        return decode_tiled(vae, x, settings(**kw), devices=decode_devices(vae, "default"), progress=progress)
    if not _lists_devices():  # ComfyUI 0.3.x: the devices given as they are
        return decode_tiled(vae, x, settings(**kw), devices=tuple(cpu_devices(n)), progress=progress)
    with fake_devices(n):
        devices = decode_devices(vae, "all")
        assert devices == tuple(cpu_devices(n)), f"'all' gave {devices}"
        return decode_tiled(vae, x, settings(**kw), devices=devices, progress=progress)


def _lists_devices() -> bool:
    import comfy.model_management as mm

    return hasattr(mm, "get_all_torch_devices")


def _pool_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_worker_loop" in getattr(getattr(t, "_target", None), "__name__", "")}


@contextlib.contextmanager
def _on_other_devices(action):
    """Run `action(module)` before every forward of a decoder's module in any thread but this one (a pool thread:
    another device), through torch's global forward pre-hook."""
    me = threading.get_ident()

    def hook(module, _args):
        if threading.get_ident() != me and type(module).__name__ in ("Decoder", "CausalDiffusionDecoder"):
            action(module)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@pytest.mark.parametrize("n", [2, 3])
def test_the_conv_decoder_on_several_devices_is_the_one_device_decode_bit_for_bit(vae, n):
    import comfy.model_management as mm
    from ltx_tdp.ltx.vae.devices import vae_on

    x = latent(2, 5, 7, seed=4)
    before = _pool_threads()
    want = _decode(vae, x, **OVERLAPPING)
    done, elsewhere = [], []
    with _on_other_devices(elsewhere.append):
        got = _decode(vae, x, n, progress=lambda d, t: done.append((d, t)), **OVERLAPPING)
    assert elsewhere or not has_core_multigpu(), "no tile ran in another device's thread"
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"
    assert done[-1] == (done[-1][1], done[-1][1]) and done == sorted(done), f"progress {done}"
    assert _pool_threads() <= before, "a pool thread outlived the decode"
    loaded = {id(m.model) for m in mm.current_loaded_models if m.model is not None}  # their patchers
    for device in cpu_devices(n)[1:]:
        replica = vae_on(vae, device)
        assert replica is not vae and replica.patcher.load_device == device, f"replica on {device}"
        assert id(replica.patcher) in loaded, f"ComfyUI did not load the replica on {device}"


@pytest.mark.parametrize("n", [2, 3])
def test_the_diffusion_decoder_on_several_devices_is_the_one_device_decode_bit_for_bit(dvae, n):
    x = latent(2, 3, 4, seed=5, channels=int(dvae.latent_channels))
    want = _decode(dvae, x, spatial_tile=64)
    got = _decode(dvae, x, n, spatial_tile=64)
    assert torch.equal(got, want), f"max difference {(got - want).abs().max().item():.3e}"


def test_a_replica_is_reused_and_made_again_when_the_weights_change(vae):
    from ltx_tdp.ltx.vae.devices import vae_on

    device = torch.device("cpu", 1)
    first = vae_on(vae, device)
    assert vae_on(vae, device) is first, "a second decode made a second replica"
    assert vae_on(vae, torch.device("cpu")) is vae, "the VAE's own device got a replica"
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(first.first_stage_model.parameters(),
                                                             vae.first_stage_model.parameters()))


def test_a_failing_device_names_itself_stops_the_decode_and_the_next_decode_runs(vae, pool):
    x = latent(2, 5, 7, seed=6)
    before = _pool_threads()

    def fail(_module):
        raise RuntimeError("simulated fault on this device")

    with _on_other_devices(fail), pytest.raises(Exception) as caught:
        _decode(vae, x, 2, **OVERLAPPING)
    assert "cpu:1" in str(caught.value) and "simulated fault" in str(caught.value), str(caught.value)
    assert _pool_threads() <= before, "a pool thread outlived the failed decode"
    assert torch.equal(_decode(vae, x, 2, **OVERLAPPING), _decode(vae, x, **OVERLAPPING))


def test_cancel_on_another_device_stops_every_device(vae, pool):
    import comfy.model_management as mm

    x = latent(2, 5, 7, seed=7)
    before = _pool_threads()
    started = []

    def cancel(_module):
        started.append(threading.get_ident())
        if len(started) == 1:
            mm.interrupt_current_processing(True)

    with _on_other_devices(cancel), pytest.raises(mm.InterruptProcessingException):
        _decode(vae, x, 2, **OVERLAPPING)
    mm.interrupt_current_processing(False)
    assert len(started) == 1, f"{len(started)} tiles started on the other device after Cancel"
    assert _pool_threads() <= before, "a pool thread outlived the cancelled decode"


@pytest.mark.parametrize("decoder", ["conv", "diffusion"])
def test_another_devices_tiles_hold_at_most_the_one_device_estimate(vae, decoder):
    """What another device's thread runs (`DeviceDecodeJob.tiles_on`: its replica, one tile at a time, each moved to
    system memory) holds at most the decode's logged estimate (device and system memory: on the CPU both are the
    live-tensor meter's; measured 21 of 37 MiB for the conv decoder, 39 of 51 for the diffusion one)."""
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.ltx.vae.devices import DeviceDecodeJob
    from ltx_tdp_devkit.memory import PeakTensorBytes

    if decoder == "diffusion" and not dv.has_diffusion_vae():
        pytest.skip(dv.SKIP_REASON)
    vae = dv.load(seed=1) if decoder == "diffusion" else vae
    x = latent(3, 6, 8, seed=8, channels=int(vae.latent_channels))
    chosen = settings(spatial_tile=96, context=2)
    decode = prepare_decode(vae, x, chosen)
    with torch.inference_mode():
        decode.load()
    memory = decode.memory()
    job = DeviceDecodeJob(vae, decode.latent, chosen, decode.context, decode.noise)
    run = job.tiles_on(torch.device("cpu", 1))
    tiles = decode.plan.pixels.tiles
    assert len(tiles) >= 4, f"{len(tiles)} tiles"
    with torch.inference_mode():
        run(tiles[0])  # warm up: first-call allocations are not the decode's
        meter = PeakTensorBytes()
        with meter:
            for tile in tiles:
                run(tile)  # the tile in system memory, dropped as the next one decodes
    estimate = memory.work + memory.host
    assert meter.peak <= estimate, f"tracked {meter.peak / 2**20:.1f} MiB, estimated {estimate / 2**20:.1f} MiB"
