"""LTX-2.5's diffusion video decoder read as layers: what each position of it depends on, and its reach.

ComfyUI >= 0.32's `CausalDiffusionVAE` decodes with a `NADiffusionDecoder`:

* stages 1-4: neighbourhood-attention blocks (kernel (kt, kh, kw) per stage) at growing resolution, each
  stage followed by a linear pixel-shuffle upsampler (stride (st, sh, sw); in time a stride-2 shuffle drops
  its first frame when the block holds the clip's first frame); before stage 1 the last latent frame is
  repeated `trailing_pad_latent_frames` times, and that padding is cut off after stage 4;
* stage 5: `steps` passes of diffusion blocks (neighbourhood attention of the stage-5 kernel) over the
  patchified noise, guided position by position by stage 4's output, then unpatchified (`patch_size`).

Linear layers, RMS norms, SwiGLU MLPs and the AdaLN modulation (from the timestep only) read their own
position. So along each axis the decoder is a chain of `tiling.dependency` ops, cut here in three parts:
`head` (stages 1-3: latent -> stage 3's output), `mid` (stage 3's upsampler, stage 4, its upsampler, the
padding cut: -> stage 5's input) and `tail` (stage 5 -> pixels). A decoder whose modules are not all of these
kinds is refused (`read_layers` raises VaeDecodeError): its reach could not be counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling.dependency import AxisOp, CropEnd, DecoderReach, Neighbourhood, PadEnd, Upsample, axis_reach, lengths
from ..errors import VaeDecodeError

KNOWN_MODULES = frozenset({
    "NADiffusionDecoder", "ModuleList", "Sequential", "Linear", "SiLU", "RMSNorm", "NABlock", "DiffusionNABlock",
    "NeighborhoodAttention3D", "SwiGLU", "LinearPixelShuffleUpsample", "TimestepEmbedder", "AdaLNZero",
})
"""Module classes whose dependency rule the ops below state (everything else is refused)."""


@dataclass(frozen=True)
class DiffusionLayers:
    """The layers of a NADiffusionDecoder that fix which positions depend on which."""

    kernels: tuple[tuple[int, int, int], ...]
    """Neighbourhood-attention kernel (time, height, width) of every deterministic stage."""
    depths: tuple[int, ...]
    strides: tuple[tuple[int, int, int], ...]
    """Upsampler stride after every deterministic stage."""
    diffusion_kernel: tuple[int, int, int]
    diffusion_depth: int
    steps: int
    patch: int
    pad: int
    """Latent frames repeated after the last one through stages 1-4."""
    channels: tuple[int, ...] = ()
    """Width of every stage, the diffusion stage's last; then the pixel channels of a stage-5 position (out
    channels x patch^2). For the memory accounting (`ltx.vae.memory`)."""

    @property
    def split(self) -> int:
        """Stages [0, split) are the head; the head ends before stage `split - 1`'s upsampler."""
        return len(self.depths) - 1

    def ops(self, axis: int) -> tuple[list[AxisOp], list[AxisOp], list[AxisOp]]:
        """(head, mid, tail) ops along `axis` (0 time, 1 space) of the grids: latent -> stage 3's output ->
        stage 5's input -> pixels."""
        stages: list[list[AxisOp]] = []
        ups: list[AxisOp] = []
        for kernel, depth, stride in zip(self.kernels, self.depths, self.strides):
            stages.append([Neighbourhood(kernel[axis])] * depth)
            s = stride[axis]
            ups.append(Upsample(s, 1 if axis == 0 and s == 2 else 0))
        head: list[AxisOp] = [PadEnd(self.pad)] if axis == 0 and self.pad else []
        for i in range(self.split):
            head += stages[i] + ([ups[i]] if i < self.split - 1 else [])
        mid: list[AxisOp] = [ups[self.split - 1]]
        for i in range(self.split, len(stages)):
            mid += stages[i] + [ups[i]]
        if axis == 0 and self.pad:
            mid.append(CropEnd(self.pad * math.prod(s[0] for s in self.strides)))
        tail: list[AxisOp] = [Neighbourhood(self.diffusion_kernel[axis])] * (self.diffusion_depth * self.steps)
        tail.append(Upsample(1 if axis == 0 else self.patch))
        return head, mid, tail

    def chain(self, axis: int) -> list[AxisOp]:
        head, mid, tail = self.ops(axis)
        return head + mid + tail

    def stage5_per_cell(self, axis: int) -> int:
        """Stage-5 positions a latent cell becomes along `axis`."""
        return math.prod(s[axis] for s in self.strides)


def _kernel(block: Any) -> tuple[int, int, int]:
    kernel = tuple(int(k) for k in block.attn.kernel_size)
    if len(kernel) != 3 or any(k < 1 for k in kernel):
        raise ValueError(f"a neighbourhood-attention kernel {kernel}")
    return kernel


def read_layers(decoder: torch.nn.Module) -> DiffusionLayers:
    """The layers of ComfyUI's NADiffusionDecoder `decoder`. Raises VaeDecodeError naming the first module or
    setting whose dependency rule is not known (its reach could not be counted, so no tile could be exact)."""
    for name, module in decoder.named_modules():
        if type(module).__name__ not in KNOWN_MODULES:
            raise VaeDecodeError(
                f"this LTX-2.5 diffusion decoder has a layer the tiled decode cannot count ({name or 'decoder'}: "
                f"{type(module).__name__}); it would not know how far each pixel reaches. Decode it with "
                f"ComfyUI's VAE Decode instead")
    try:
        stages, ups = list(decoder.det_stages), list(decoder.upsamples)
        kernels = tuple(_kernel(stage[0]) for stage in stages)
        if any(_kernel(b) != k for stage, k in zip(stages, kernels) for b in stage):
            raise ValueError("blocks of one stage with different kernels")
        strides = tuple(tuple(int(s) for s in up.stride) for up in ups)
        diffusion = {_kernel(b) for b in decoder.diff_blocks}
        steps = int(decoder.default_inference_timesteps.shape[0])
        output = str(decoder.model_output_type)
        channels = (*(int(stage[0].attn.dim) for stage in stages), int(decoder.context_channels),
                    int(decoder.conv_in_x_t.in_features))
        layers = DiffusionLayers(kernels, tuple(len(s) for s in stages), strides, diffusion.pop(),
                                 len(decoder.diff_blocks), steps, int(decoder.patch_size),
                                 int(decoder.trailing_pad_latent_frames), channels)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:
        raise VaeDecodeError(f"this LTX-2.5 diffusion decoder is not laid out as the tiled decode knows ({e}); "
                             f"decode it with ComfyUI's VAE Decode instead") from e
    problems = []
    if len(stages) < 2 or len(ups) != len(stages) or diffusion:
        problems.append("stages, upsamplers and diffusion blocks do not line up")
    if any(s[0] not in (1, 2) or s[1] != s[2] or min(s) < 1 for s in strides):
        problems.append(f"upsampler strides {strides} (time x1 or x2, square space)")
    if output not in ("x0", "v") or steps < 1:
        problems.append(f"output type {output!r} with {steps} steps")
    if problems:
        raise VaeDecodeError(f"this LTX-2.5 diffusion decoder has {'; '.join(problems)}, which the tiled decode "
                             f"does not know; decode it with ComfyUI's VAE Decode instead")
    return layers


def counted_reach(layers: DiffusionLayers) -> DecoderReach:
    """The whole decoder's reach, counted from its kernels, depths, strides and steps on the full chain
    (`tiling.dependency.axis_reach`). tests/ltx/vae check it by perturbing the latent."""
    return DecoderReach(axis_reach(layers.chain(0), causal=True), axis_reach(layers.chain(1), causal=False))


def stage5_reach(layers: DiffusionLayers) -> tuple[int, int]:
    """(time, space) latent cells of context on both sides at which stage 5 alone is exact (the part the decode's
    quality presets cut short): in the interior of a long grid a neighbourhood of k widens by k // 2 a block, at stage
    5's resolution."""
    out = []
    for axis in (0, 1):
        per_cell = layers.stage5_per_cell(axis)
        neighbourhoods = layers.ops(axis)[2][:-1]
        n = 512 * per_cell
        half = sum(min(op.kernel, n) // 2 for op in neighbourhoods)
        out.append(-(-half // per_cell))
    return out[0], out[1]


def grid_lengths(layers: DiffusionLayers, axis: int, n: int) -> tuple[int, int, int]:
    """(stage 3's output, stage 5's input, pixels) lengths along `axis` for a latent of `n` cells there."""
    head, mid, tail = layers.ops(axis)
    n3 = lengths(head, n)[-1]
    n5 = lengths(mid, n3)[-1]
    return n3, n5, lengths(tail, n5)[-1]
