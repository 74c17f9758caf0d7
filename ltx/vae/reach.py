"""How far an LTX video VAE decoder reaches: the latent cells each pixel depends on, counted and measured.

A tile decoded on its own equals the untiled decode exactly (up to float rounding) when every pixel it
keeps depends only on latent cells inside the block it decodes. Two ways to know which cells a pixel
depends on:

* **counted** (`counted_reach`): the decoder's layers as `tiling.dependency` ops, walked backwards from one
  pixel (`tiling.dependency.axis_reach`). A convolution of kernel k with padding (b before, a after) reads
  positions [o - b, o - b + k - 1] (`Conv(b, a)`); a depth-to-space upsampler of stride s maps position i to
  i // s (`Upsample(s)`; in time, LTX's upsamplers drop their first output frame, so output frame i comes from
  input frame (i + 1) // 2); `patch_size` maps a pixel p to p // patch. Exact for decoders built from
  convolutions, upsamplers and per-pixel layers only.
* **measured** (`measured_reach`): the gradient of one pixel with respect to the latent. Outside a
  pixel's dependency set the gradient is exactly zero (no float noise: zero upstream gradients stay
  zero), so the nonzero cells are the dependency set, whatever the weights.

A layer that mixes the whole frame or clip (GroupNorm over space and time, attention) makes every pixel
depend on every cell: no finite context is exact. `whole_frame_layers` names such layers; the gradient
shows it too (nonzero on the whole latent). PixelNorm and LTX's LayerNorm normalise over channels only.

Axis conventions follow the decode (tiling.geometry): latent cell c owns pixels [32c, 32c + 32) in space;
in time latent frame 0 owns frame 0 and latent frame c >= 1 owns frames [8c - 7, 8c].
"""

from __future__ import annotations

import torch

from ...tiling import AxisScale
from ...tiling.dependency import AxisOp, AxisReach, Conv, DecoderReach, Span, Upsample, axis_reach


def whole_frame_layers(decoder: torch.nn.Module) -> tuple[str, ...]:
    """Names of the decoder's layers that mix a whole frame or clip (GroupNorm, attention, batch norms)."""
    names = []
    for name, module in decoder.named_modules():
        kind = type(module).__name__.lower()
        if isinstance(module, (torch.nn.GroupNorm, torch.nn.modules.batchnorm._NormBase)) or "attention" in kind:
            names.append(name or type(module).__name__)
    return tuple(names)


def decoder_ops(decoder: torch.nn.Module) -> tuple[list[AxisOp], list[AxisOp]]:
    """The decoder's convolutions and upsamplers in the order they run, as (time, space) dependency ops; space
    ends with the patch (`patch_size` pixels a position)."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import DepthToSpaceUpsample

    causal = bool(getattr(decoder, "causal", True))
    time: list[AxisOp] = []
    space: list[AxisOp] = []
    pending: tuple[int, int, int] | None = None
    for module in decoder.modules():
        if isinstance(module, DepthToSpaceUpsample):
            pending = tuple(module.stride)
        elif isinstance(module, torch.nn.Conv3d):
            kt, kh, kw = module.kernel_size
            if kh != kw:
                raise ValueError(f"a decoder convolution with a {kh} x {kw} kernel: height and width differ")
            if (kt, kh) != (1, 1):
                # LTX's CausalConv3d pads time itself: k - 1 frames before when causal, (k - 1) // 2 each side
                # when not; space is padded by the convolution, k // 2 each side.
                time.append(Conv(kt - 1, 0) if causal else Conv((kt - 1) // 2, (kt - 1) // 2))
                space.append(Conv(module.padding[1], kh - 1 - module.padding[1]))
            if pending is not None:  # the upsampler's own convolution runs before its depth-to-space
                if pending[1] != pending[2] or pending[0] not in (1, 2):
                    raise ValueError(f"an upsampler of stride {pending}: only time x1/x2 and square space strides")
                # in time LTX's upsamplers drop their first output frame: output i comes from input (i + 1) // 2
                time.append(Upsample(pending[0], 1 if pending[0] == 2 else 0))
                space.append(Upsample(pending[1]))
                pending = None
    space.append(Upsample(int(getattr(decoder, "patch_size", 1))))
    return time, space


def counted_reach(decoder: torch.nn.Module) -> DecoderReach:
    """The reach of an LTX `Decoder` (ComfyUI's class) counted over its kernels, paddings and upsamplers
    (`tiling.dependency.axis_reach`).

    Exact for decoders without whole-frame layers (see `whole_frame_layers`); `measured_reach` checks it.
    """
    time, space = decoder_ops(decoder)
    return DecoderReach(axis_reach(time, causal=True), axis_reach(space, causal=False))


def _decode(decoder: torch.nn.Module, latent: torch.Tensor, timestep: float | None) -> torch.Tensor:
    if getattr(decoder, "timestep_conditioning", False):
        return decoder(latent, timestep=torch.tensor([timestep if timestep is not None else 0.05]))
    return decoder(latent)


def _along(mask: torch.Tensor, axis: int) -> torch.Tensor:
    """1-D mask along `axis`: True where any element of that slice is True."""
    return mask.movedim(axis, 0).flatten(1).any(1)


def dependency_spans(decoder: torch.nn.Module, latent: torch.Tensor, pixels: tuple[int, ...], axis: int,
                     timestep: float | None = None) -> list[Span]:
    """The latent cells along `axis` (2 time, 3 height, 4 width) that each output pixel of `pixels`
    (positions along that axis) depends on, from the gradient of its values summed over the other axes.

    One forward pass, one backward pass per pixel. A pixel whose gradient is nonzero on the whole latent
    (a whole-frame layer, or a latent shorter than the reach) gets the whole axis.
    """
    x = latent.detach().clone().requires_grad_(True)
    spans = []
    with torch.enable_grad():
        out = _decode(decoder, x, timestep)
        for k, pixel in enumerate(pixels):
            (grad,) = torch.autograd.grad(out.narrow(axis, pixel, 1).sum(), x, retain_graph=k + 1 < len(pixels))
            cells = _along(grad.ne(0), axis).nonzero().flatten()
            if cells.numel() == 0:
                raise ValueError(f"pixel {pixel} along axis {axis} depends on no latent cell")
            spans.append(Span(int(cells.min()), int(cells.max())))
    return spans


def measured_reach(decoder: torch.nn.Module, channels: int, axis: int, cells: int, cell: int | None = None,
                   timestep: float | None = None, seed: int = 0, thickness: int | None = None) -> AxisReach:
    """The reach along `axis` (2 time, 3 height, 4 width) measured on a latent `cells` long on that axis and
    `thickness` cells on the others (default 1, or 2 for decoders with reflect padding, which needs more
    than one cell), around latent cell `cell` (default: the middle).

    `before`/`after` come from the gradients of the first and the last pixel that `cell` owns
    (`dependency_spans`); `pixels_before`/`pixels_after` from adding 1 to `cell` and finding the pixels
    that change (bit-exact comparison: a pixel outside the reach is computed from identical inputs).
    """
    if thickness is None:
        reflect = any(getattr(m, "padding_mode", "zeros") == "reflect" for m in decoder.modules())
        thickness = 2 if reflect else 1
    shape = [1, channels, 1, thickness, thickness]
    shape[axis] = cells
    latent = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    cell = cells // 2 if cell is None else cell
    with torch.inference_mode():
        base = _decode(decoder, latent, timestep)
        bumped = latent.clone()
        bumped.narrow(axis, cell, 1).add_(1.0)
        touched = _along(_decode(decoder, bumped, timestep) != base, axis).nonzero().flatten()
    length = base.shape[axis]
    is_time = axis == 2
    factor = (length - 1) // (cells - 1) if is_time else length // cells
    owned = AxisScale(factor, causal=is_time).owned_pixels(cell, cell + 1)
    first, last = owned.start, owned.end - 1
    (lo, _), (_, hi) = dependency_spans(decoder, latent, (first, last), axis, timestep)
    return AxisReach(cell - lo, hi - cell, first - int(touched.min()), int(touched.max()) - last)
