"""Issue 30's checks of the tiled VAE decode on the device (items 6 and 7), with the test suite's tiny VAEs at sizes
whose buffers are measurable (121 frames at 1024 px on a GPU; a few frames on the CPU).

* diffusion_noise_field (item 6): with a model resident on the device (the tiny transformer, loaded by ComfyUI), the
  LTX-2.5 diffusion decode is planned (nothing drawn: the device's memory does not move), then loaded: ComfyUI is
  asked for room including the noise field (`memory().work`), then the field is drawn on the device and kept in
  system memory; one tile equals `vae.decode` bit for bit (the same CUDA generator), and a 2-rank group (both ranks
  on this device, gloo) equals one process, the field sent after the job's pickle.
* decoded_tile_memory (item 7): the peak of a tiled decode (conv and diffusion, bf16 VAEs on the device: torch's
  allocator peak above what was allocated before; on the CPU the live-tensor meter) against the decode's own
  accounting (`TiledDecode.memory`: the weights, the largest tile's decode, the pack's buffers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from correctness import GROUP_LIMIT, relative
from models import load_tiny_transformer
from runtime import Records, device

GIB = 2**30


def _on_gpu() -> bool:
    return device().type == "cuda"


def _latent(frames: int, height: int, width: int, seed: int) -> torch.Tensor:
    from ltx_tdp_devkit.ltx_helpers import randn

    return randn(1, 128, frames, height, width, seed=seed)


def _diffusion_vae(dtype: torch.dtype | None) -> Any:
    """The tiny LTX-2.5 diffusion VAE through `comfy.sd.VAE` on ComfyUI's default VAE device (None: ComfyUI < 0.32)."""
    import comfy.sd
    from ltx_tdp_devkit import diffusion_vae as dv

    if not dv.has_diffusion_vae():
        return None
    return comfy.sd.VAE(sd=dv.state_dict(seed=1), metadata=dv.metadata(), dtype=dtype)


def _conv_vae(base_dir: Path, dtype: torch.dtype | None) -> Any:
    import comfy.sd
    import comfy.utils
    from ltx_tdp_devkit import tiny_models

    path = base_dir / "tiny_vae.safetensors"
    if not path.exists():
        tiny_models.build_vae(path)
    sd, meta = comfy.utils.load_torch_file(str(path), return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=meta, dtype=dtype)


def _allocated() -> int:
    return torch.cuda.memory_allocated(device()) if _on_gpu() else 0


def diffusion_noise_field(rec: Records, base_dir: Path) -> None:
    import comfy.model_management as mm
    from ltx_tdp.ltx.vae import DecodeSettings, decode_tiled
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp.multigpu.group import get_group
    from ltx_tdp.multigpu.settings import resolve_settings

    name = "noise field drawn after ComfyUI made room for it (item 6)"
    vae = _diffusion_vae(torch.bfloat16 if _on_gpu() else None)
    if vae is None:
        rec.add(name, "skip", reason="this ComfyUI has no LTX-2.5 diffusion VAE (ComfyUI >= 0.32)")
        return
    resident = load_tiny_transformer(base_dir, torch.bfloat16)
    mm.load_models_gpu([resident])  # a sampler's model, still on the device when the decode starts
    x = _latent(16, 8, 8, seed=2) if _on_gpu() else _latent(3, 2, 4, seed=2)
    settings = DecodeSettings(spatial_tile=128, temporal_tile=4096)
    before = _allocated()
    decode = prepare_decode(vae, x, settings)
    planned, undrawn = _allocated() - before, decode.noise is None
    memory = decode.memory()
    if _on_gpu():
        torch.cuda.reset_peak_memory_stats(device())
    base = _allocated()
    decode.load()  # asks ComfyUI for memory.work (the draw included), then draws
    drawn = (torch.cuda.max_memory_allocated(device()) - base) if _on_gpu() else None
    noise = decode.noise
    ok = (planned == 0 and undrawn and memory.work >= memory.draw > 0 and noise is not None
          and noise.device.type == "cpu" and (drawn is None or drawn >= memory.draw))
    rec.add(name, "ok" if ok else "fail", value=None if drawn is None else drawn / memory.work, limit=None,
            detail=f"planning allocated {planned} bytes on the device and drew nothing: {undrawn}; ComfyUI asked for "
            f"{memory.work / GIB:.3f} GiB beside the weights, the field {memory.draw / GIB:.3f} GiB drawn on "
            f"{vae.device} (load and draw peaked {'—' if drawn is None else f'{drawn / GIB:.3f} GiB'} above before), "
            f"kept on {None if noise is None else noise.device}; {memory.describe()}")
    one = decode_tiled(vae, x, DecodeSettings(spatial_tile=4096, temporal_tile=4096))
    with torch.inference_mode():
        want = vae.decode(x)
    equal = one.shape == want.shape and torch.equal(one, want.to(one.dtype))
    rec.add("diffusion decode, 1 tile == vae.decode (item 6)", "ok" if equal else "fail",
            value=(one.double() - want.double()).abs().max().item() if one.shape == want.shape else None, limit=0.0,
            detail=f"bit-identical: {equal}; frames {tuple(one.shape)}; VAE {str(vae.vae_dtype)[6:]} on {vae.device}")
    dev = str(device())
    group = get_group(resolve_settings(2, f"{dev},{dev}", "gloo", 60, "127.0.0.1", 0, local_device=dev))
    try:
        single = decode_tiled(vae, x, settings)
        multi = decode_tiled(vae, x, settings, group=group)
        sent = group.session().stats["send_bytes"]
    finally:
        group.shutdown()
    err = relative(multi, single)
    rec.add("2-rank group == single process, diffusion decode (item 6)", "ok" if err <= GROUP_LIMIT else "fail",
            value=err, limit=GROUP_LIMIT, detail=f"gloo, both ranks on {dev}; {sent / GIB:.3f} GiB of jobs sent (their "
            f"pickles, then their latents and noise fields); max |diff| / max |frames| = {err:.2e}")


def _peak_against_estimate(rec: Records, label: str, vae: Any, x: torch.Tensor, settings: Any) -> None:
    from ltx_tdp.ltx.vae import decode_tiled
    from ltx_tdp.ltx.vae.decoder import prepare_decode
    from ltx_tdp_devkit.memory import PeakTensorBytes

    decode_tiled(vae, x[:, :, :2, :2, :2], settings)  # warm up: kernels, the VAE's first load
    memory = prepare_decode(vae, x, settings).memory()
    if _on_gpu():
        torch.cuda.synchronize(device())
        base = torch.cuda.memory_allocated(device())
        torch.cuda.reset_peak_memory_stats(device())
        frames = decode_tiled(vae, x, settings)
        torch.cuda.synchronize(device())
        peak, bound, where = torch.cuda.max_memory_allocated(device()) - base, memory.device_peak, "device"
    else:
        meter = PeakTensorBytes()
        with meter:
            frames = decode_tiled(vae, x, settings)
        peak, bound, where = meter.peak, memory.work + memory.host, "CPU (device and system memory together)"
    ok = 0 < peak <= bound and bool(torch.isfinite(frames).all())
    rec.add(f"{label} decode's peak within its estimate (item 7)", "ok" if ok else "fail", value=peak / bound,
            limit=1.0, detail=f"peak {peak / GIB:.3f} GiB above before on the {where}; estimate {bound / GIB:.3f} GiB "
            f"({memory.describe()}); frames {tuple(frames.shape)}, VAE {str(vae.vae_dtype)[6:]}")


def decoded_tile_memory(rec: Records, base_dir: Path) -> None:
    from ltx_tdp.ltx.vae import DecodeSettings

    dtype = torch.bfloat16 if _on_gpu() else None
    size = (16, 32, 32) if _on_gpu() else (3, 8, 8)
    _peak_against_estimate(rec, "conv (LTX-2's decoder kind)", _conv_vae(base_dir, dtype), _latent(*size, seed=3),
                           DecodeSettings(spatial_tile=512, spatial_overlap=64))
    vae = _diffusion_vae(dtype)
    if vae is None:
        rec.add("diffusion (LTX-2.5) decode's peak within its estimate (item 7)", "skip",
                reason="this ComfyUI has no LTX-2.5 diffusion VAE (ComfyUI >= 0.32)")
        return
    size = (16, 8, 8) if _on_gpu() else (3, 2, 4)
    _peak_against_estimate(rec, "diffusion (LTX-2.5)", vae, _latent(*size, seed=4),
                           DecodeSettings(spatial_tile=128, temporal_tile=4096))
