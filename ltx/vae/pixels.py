"""A decoded tile's pixels on their way into the output frames: moved once, a frame at a time, to where they go,
then brought to [0, 1] in fp32 on the CPU, as ComfyUI's VAEDecode does (`vae.process_output` on fp32 frames in
system memory), so a tile covering everything gives VAEDecode's frames bit for bit."""

from __future__ import annotations

from typing import Any

import torch


def pixels_on(raw: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`raw` (a tile's pixels, (batch, channels, frames, height, width), possibly a strided crop) contiguous on
    `device`, in its own dtype. Copied a frame at a time where it changes device, so its device holds at most one
    frame's contiguous copy beside it (a whole strided crop would be made contiguous there first)."""
    device = torch.device(device)
    if raw.device == device:
        return raw.contiguous()
    if raw.is_contiguous():  # copied as it is, no copy on its device first
        return raw.to(device)
    out = torch.empty(raw.shape, dtype=raw.dtype, device=device)
    for frame in range(raw.shape[2]):
        out[:, :, frame].copy_(raw[:, :, frame])
    return out


def processed(vae: Any, raw: torch.Tensor) -> torch.Tensor:
    """A tile's pixels as ComfyUI's VAEDecode gives them: in system memory, cast to fp32 there (exact from bf16
    or fp16), `vae.process_output` applied. The crop travels in the VAE's dtype (half the bytes of fp32)."""
    return vae.process_output(pixels_on(raw, "cpu").float())


def pixel_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a tile's pixels of `shape` in `dtype`."""
    return torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
