"""How far an LTX video VAE decoder reaches: the latent cells each pixel depends on, counted and measured.

A tile decoded on its own equals the untiled decode exactly (up to float rounding) when every pixel it
keeps depends only on latent cells inside the block it decodes. Two ways to know which cells a pixel
depends on:

* **counted** (`counted_reach`): walk the decoder's layers backwards from one pixel. A convolution of
  kernel k with padding (b before, a after) reads positions [o - b, o - b + k - 1]; a depth-to-space
  upsampler of stride s maps position i to i // s (in time, LTX's upsamplers drop their first output frame,
  so output frame i comes from input frame (i + 1) // 2); `patch_size` maps a pixel p to p // patch. Exact
  for decoders built from convolutions, upsamplers and per-pixel layers only.
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

from dataclasses import dataclass
import torch

from ...tiling import AxisScale


@dataclass(frozen=True)
class AxisReach:
    """Reach of a decoder along one axis, in latent cells and pixels.

    `before` / `after`: latent cells before the first owning cell of a tile's first pixel, and after the
    last owning cell of its last pixel, that those pixels depend on: the context a tile needs on each
    side to be exact. `pixels_before` / `pixels_after`: how many pixels before and after its own pixels one
    latent cell changes.
    """

    before: int
    after: int
    pixels_before: int
    pixels_after: int

    @property
    def context(self) -> int:
        """Latent cells of context on both sides that make a tile exact."""
        return max(self.before, self.after)


@dataclass(frozen=True)
class DecoderReach:
    """Reach along time and space (height and width have the same kernels in LTX decoders)."""

    time: AxisReach
    space: AxisReach


@dataclass(frozen=True)
class _Op:
    kind: str  # "conv" or "up"
    time: tuple[int, int] | int  # conv: (pad before, pad after) ... see _conv_op; up: stride
    space: tuple[int, int] | int


def whole_frame_layers(decoder: torch.nn.Module) -> tuple[str, ...]:
    """Names of the decoder's layers that mix a whole frame or clip (GroupNorm, attention, batch norms)."""
    names = []
    for name, module in decoder.named_modules():
        kind = type(module).__name__.lower()
        if isinstance(module, (torch.nn.GroupNorm, torch.nn.modules.batchnorm._NormBase)) or "attention" in kind:
            names.append(name or type(module).__name__)
    return tuple(names)


def _decoder_ops(decoder: torch.nn.Module) -> list[_Op]:
    """The decoder's convolutions and upsamplers in the order they run, as paddings and strides."""
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import DepthToSpaceUpsample

    causal = bool(getattr(decoder, "causal", True))
    ops: list[_Op] = []
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
                time = (kt - 1, 0) if causal else ((kt - 1) // 2, (kt - 1) // 2)
                space = (module.padding[1], kh - 1 - module.padding[1])
                ops.append(_Op("conv", time, space))
            if pending is not None:  # the upsampler's own convolution runs before its depth-to-space
                if pending[1] != pending[2] or pending[0] not in (1, 2):
                    raise ValueError(f"an upsampler of stride {pending}: only time x1/x2 and square space strides")
                ops.append(_Op("up", pending[0], pending[1]))
                pending = None
    return ops


def _dependency(ops: list[_Op], pixel: int, axis: str, patch: int) -> tuple[int, int]:
    """[lo, hi] latent cells that `pixel` depends on along `axis` ("time" or "space"), counted."""
    lo = hi = pixel // patch if axis == "space" else pixel
    for op in reversed(ops):
        spec = op.time if axis == "time" else op.space
        if op.kind == "conv":
            before, after = spec
            lo, hi = lo - before, hi + after
        elif axis == "time" and spec == 2:
            lo, hi = (lo + 1) // 2, (hi + 1) // 2
        else:
            lo, hi = lo // spec, hi // spec
    return lo, hi


def _factor(ops: list[_Op], axis: str, patch: int) -> int:
    factor = patch if axis == "space" else 1
    for op in ops:
        if op.kind == "up":
            factor *= op.time if axis == "time" else op.space
    return factor


def _owned(cell: int, factor: int, axis: str) -> tuple[int, int]:
    """First and last pixel that latent cell `cell` (>= 1) owns (tiling.geometry: causal in time)."""
    owned = AxisScale(factor, causal=axis == "time").owned_pixels(cell, cell + 1)
    return owned.start, owned.end - 1


def _axis_reach(ops: list[_Op], axis: str, patch: int) -> AxisReach:
    factor = _factor(ops, axis, patch)
    cell = 1000  # far from both ends: the interior, where nothing is clamped
    first, last = _owned(cell, factor, axis)
    before = cell - _dependency(ops, first, axis, patch)[0]
    after = _dependency(ops, last, axis, patch)[1] - cell
    touched = [p for p in range(first - 64 * factor, last + 64 * factor)
               if _dependency(ops, p, axis, patch)[0] <= cell <= _dependency(ops, p, axis, patch)[1]]
    return AxisReach(before, after, first - min(touched), max(touched) - last)


def counted_reach(decoder: torch.nn.Module) -> DecoderReach:
    """The reach of an LTX `Decoder` (ComfyUI's class) counted over its kernels, paddings and upsamplers.

    Exact for decoders without whole-frame layers (see `whole_frame_layers`); `measured_reach` checks it.
    """
    ops = _decoder_ops(decoder)
    patch = int(getattr(decoder, "patch_size", 1))
    return DecoderReach(_axis_reach(ops, "time", patch), _axis_reach(ops, "space", patch))


def _decode(decoder: torch.nn.Module, latent: torch.Tensor, timestep: float | None) -> torch.Tensor:
    if getattr(decoder, "timestep_conditioning", False):
        return decoder(latent, timestep=torch.tensor([timestep if timestep is not None else 0.05]))
    return decoder(latent)


def _along(mask: torch.Tensor, axis: int) -> torch.Tensor:
    """1-D mask along `axis`: True where any element of that slice is True."""
    return mask.movedim(axis, 0).flatten(1).any(1)


def dependency_spans(decoder: torch.nn.Module, latent: torch.Tensor, pixels: tuple[int, ...], axis: int,
                     timestep: float | None = None) -> list[tuple[int, int]]:
    """[first, last] latent cells along `axis` (2 time, 3 height, 4 width) that each output pixel of `pixels`
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
            spans.append((int(cells.min()), int(cells.max())))
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
    first, last = _owned(cell, factor, "time" if is_time else "space")
    (lo, _), (_, hi) = dependency_spans(decoder, latent, (first, last), axis, timestep)
    return AxisReach(cell - lo, hi - cell, first - int(touched.min()), int(touched.max()) - last)
