"""The exact tiled decode of LTX-2.5's diffusion video decoder (ComfyUI >= 0.32's `CausalDiffusionVAE`):
`DiffusionDecode`, one of `ltx.vae.decoder`'s two `TiledDecode`s.

Its decode is stages 1-4 (neighbourhood attention + upsamplers) then a diffusion stage that denoises noise
drawn with `torch.Generator(device).manual_seed(0)` over the whole pixel shape. A tile equals the untiled
decode when it (1) decodes the positions its pixels depend on at every layer (`tiling.dependency`: neighbourhoods
are shifted inward at the grid's edges, so the block is the full grid's dependency span, not a symmetric
margin), (2) takes its slice of that one noise field, and (3) drops / pads the leading / trailing frame
exactly where the full decode does (a block holding the clip's first latent frame drops the causal duplicate
frame; one holding the last pads it).

The whole decoder reaches about 31 latent cells in space (published configuration): a tile cut from the latent
would decode almost the whole 4K frame. So per temporal chunk stages 1-3 (cheap per position) run once over the
whole frame (`head`, kept on the device while that chunk's tiles decode), and each tile runs stages 4-5 (`mid`,
`tail`, dear) from its dependency span in the head's output, which reaches only about 6 cells. `exact` gives
stage 5 its whole dependency span; a preset of c < its reach gives it c latent cells around the tile.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import Any

import torch

from ...tiling import LTX_GEOMETRY, AxisTileSize, LatentGeometry, Tile
from ...tiling.decode_plan import DecodePlan, plan_decode
from ...tiling.dependency import DecoderReach, Span, computed, needed
from ..errors import VaeDecodeError
from ..progress import check_interrupt
from .diffusion_layers import DiffusionLayers, counted_reach, grid_lengths, read_layers, stage5_reach
from .memory import DecodeMemory, diffusion_memory
from .pixels import processed
from .settings import DIFFUSION_TILE_CAP, DecodeSettings

log = logging.getLogger(__name__)

_checked: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def decode_noise(vae: Any, latent: torch.Tensor, pixel_shape: tuple[int, ...]) -> torch.Tensor:
    """The noise `vae.decode(latent)` draws, on the CPU: per batch ComfyUI decodes at once (its free-memory
    rule, asked once the VAE is loaded, as VAE.decode asks it), a fresh `torch.Generator(vae.device).manual_seed(0)`,
    `randn` of that batch's pixel shape in the VAE's dtype on its device (CUDA's numbers depend on the device's
    model, so they are drawn where ComfyUI draws them and then kept in system memory: one copy)."""
    import comfy.model_management as mm

    batch = latent.shape[0]
    per = batch
    if batch > 1:
        need = vae.memory_used_decode(tuple(latent.shape), vae.vae_dtype)
        free = getattr(vae.patcher, "get_free_memory", mm.get_free_memory)(vae.device)
        per = max(1, int(free / max(need, 1)))
    parts = []
    for start in range(0, batch, per):
        n = min(per, batch - start)
        gen = torch.Generator(device=vae.device).manual_seed(0)
        noise = torch.randn((n, *pixel_shape[1:]), dtype=vae.vae_dtype, device=vae.device, generator=gen)
        parts.append(noise.to("cpu"))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class DiffusionDecode:
    """A prepared tiled decode with LTX-2.5's diffusion decoder (a `ltx.vae.decoder.TiledDecode`).

    `context` is stage 5's (time, space) context in latent cells (its reach where exact); `stage5` the same
    with None where it is exact: stage 5 then decodes a tile's whole dependency span. `noise` is the one noise
    field the untiled decode draws: rank 0's (on a worker), else drawn by `load`, once ComfyUI has made room for
    it. Invariant: with `stage5` None on an axis the tiles' pixels equal the untiled decode's there up to float
    rounding (bit for bit when one tile covers everything).
    """

    pixels_to = torch.device("cpu")
    """Where `decode_raw`'s pixels go next (they are cropped on the VAE's device either way)."""

    def __init__(self, vae: Any, latent: torch.Tensor, plan: DecodePlan, layers: DiffusionLayers,
                 stage5: tuple[int | None, int | None], context: tuple[int, int], noise: torch.Tensor | None,
                 output_shape: tuple[int, ...]):
        self.vae, self.latent, self.plan, self.layers = vae, latent, plan, layers
        self.stage5 = stage5
        self.context = context
        self.noise = noise
        self.output_shape = output_shape
        self.cells = tuple(int(n) for n in latent.shape[2:])
        self.ops = [layers.ops(0), layers.ops(1), layers.ops(1)]
        self.grids = [grid_lengths(layers, 0 if a == 0 else 1, n) for a, n in enumerate(self.cells)]
        self._head: tuple[Span, Span, torch.Tensor] | None = None
        self._loaded = False

    @classmethod
    def reach(cls, vae: Any) -> DecoderReach:
        """The whole decoder's reach, counted from its layers (VaeDecodeError when they cannot be)."""
        return counted_reach(read_layers(vae.first_stage_model.decoder))

    @classmethod
    def decode_context(cls, vae: Any, settings: DecodeSettings) -> tuple[int, int]:
        """(time, space) latent cells of stage-5 context that `settings.quality` gives: the preset's (or custom)
        cells, at most stage 5's reach, which is "exact"."""
        return _capped(settings, stage5_reach(read_layers(vae.first_stage_model.decoder)))

    @classmethod
    def prepare(cls, vae: Any, latent: torch.Tensor, geometry: LatentGeometry, settings: DecodeSettings,
                context: tuple[int, int] | None = None, noise: torch.Tensor | None = None) -> "DiffusionDecode":
        """A `DiffusionDecode` of a checked `latent` in tiles of at most `DIFFUSION_TILE_CAP`: the layers read (or
        refused), the stage-5 context resolved (`context`, (time, space) as rank 0 resolved it, else from
        `settings.quality`); the noise field is rank 0's `noise` (a worker) or drawn by `load`."""
        plan = plan_decode(tuple(latent.shape[2:]), settings.tile_sizes(DIFFUSION_TILE_CAP), (0, 0, 0), geometry)
        decoder = vae.first_stage_model.decoder
        layers = read_layers(decoder)
        reach, reach5 = counted_reach(layers), stage5_reach(layers)
        context = _capped(settings, reach5) if context is None else (int(context[0]), int(context[1]))
        stage5 = (None if context[0] >= reach5[0] else context[0], None if context[1] >= reach5[1] else context[1])
        shape = (latent.shape[0], *plan.pixel_shape, layers_out(decoder))
        pixel_shape = (latent.shape[0], layers_out(decoder), *plan.pixel_shape)
        if noise is not None and tuple(noise.shape) != pixel_shape:
            raise VaeDecodeError(f"the decode noise has shape {tuple(noise.shape)}, the decode needs {pixel_shape}")
        log.info("LTX-2.5 diffusion decoder: reach %s latent cells in space, %s in time; stage 5 %s",
                 reach.space.context, reach.time.context,
                 "exact" if stage5 == (None, None) else f"context {stage5} (time, space)")
        return cls(vae, latent.detach().to("cpu"), plan, layers, stage5, context, noise, shape)

    # -- spans -----------------------------------------------------------------------------------------------
    def _stage5_span(self, axis: int, start: int, end: int) -> Span:
        """The stage-5 input positions that pixels [start, end) of `axis` are decoded from."""
        _, _, tail = self.ops[axis]
        n5 = self.grids[axis][1]
        cells = self.stage5[min(axis, 1)]
        if cells is None:
            return needed(tail, n5, start, end - 1)
        lo, hi = needed(tail[-1:], n5, start, end - 1)
        margin = cells * self.layers.stage5_per_cell(min(axis, 1))
        return Span(max(0, lo - margin), min(n5 - 1, hi + margin))

    def spans(self, tile: Tile) -> list[tuple[Span, Span, Span]]:
        """Per axis: (latent span, stage-3-output span, stage-5 span), in full-grid positions."""
        out = []
        for axis, interval in enumerate(tile.intervals):
            head, mid, _ = self.ops[axis]
            b5 = self._stage5_span(axis, interval.start, interval.end)
            b3 = needed(mid, self.grids[axis][0], *b5)
            out.append((needed(head, self.cells[axis], *b3), b3, b5))
        return out

    # -- compute ---------------------------------------------------------------------------------------------
    def memory(self, device_memory: int | None = None) -> DecodeMemory:
        """The pack's accounting (`ltx.vae.memory.diffusion_memory`; the same on any device)."""
        return diffusion_memory(self)

    def load(self) -> None:
        """Load the VAE on its device (ComfyUI's model management) with room for the largest tile and the noise
        field drawn there (`memory().work`), then draw the noise field if no rank gave it."""
        import comfy.model_management as mm

        vae = self.vae
        mm.load_models_gpu([vae.patcher], memory_required=self.memory().work,
                           force_full_load=bool(getattr(vae, "disable_offload", False)))
        self._loaded = True
        if self.noise is None:
            pixel_shape = (self.latent.shape[0], layers_out(vae.first_stage_model.decoder), *self.plan.pixel_shape)
            self.noise = decode_noise(vae, self.latent, pixel_shape)

    def _run_head(self, latent_span: Span) -> tuple[Span, torch.Tensor]:
        """Stages 1-3 over the whole frame for latent frames `latent_span`: (stage-3 frames it holds, channels-last
        output on the device)."""
        decoder, vae = self.vae.first_stage_model.decoder, self.vae
        lo, hi = latent_span
        z = self.latent[:, :, lo:hi + 1].to(device=vae.device, dtype=vae.vae_dtype)
        z = vae.first_stage_model.per_channel_statistics.un_normalize(z)
        spans = computed(self.ops[0][0], self.cells[0], lo, hi)
        if self.layers.pad and hi == self.cells[0] - 1:
            z = torch.cat([z, z[:, :, -1:].expand(-1, -1, self.layers.pad, -1, -1)], dim=2)
        x = decoder.conv_in(z.permute(0, 2, 3, 4, 1))
        del z
        k = 1 if self.layers.pad else 0
        for stage in range(self.layers.split):
            for block in decoder.det_stages[stage]:
                check_interrupt()
                x = block(x)
                k += 1
            if stage < self.layers.split - 1:
                x = decoder.upsamples[stage](x, drop_leading_frame=spans[k][0] == 0)
                k += 1
        return spans[-1], x

    def _head_for(self, latent_span: Span) -> tuple[Span, torch.Tensor]:
        """The head of the temporal chunk whose latent frames are `latent_span` (only one chunk's is kept)."""
        if self._head is None or self._head[0] != latent_span:
            self._head = None  # free the last chunk's head first
            span, x = self._run_head(latent_span)
            self._head = (latent_span, span, x)
        return self._head[1], self._head[2]

    def _run_mid(self, x: torch.Tensor, b3: list[Span], b5: list[Span]) -> torch.Tensor:
        """Stage 3's upsampler, stage 4 and its upsampler on a head block holding stage-3 span `b3`, cut to the
        stage-5 span `b5`."""
        decoder = self.vae.first_stage_model.decoder
        s = self.layers.split - 1
        spans = [computed(self.ops[a][1], self.grids[a][0], *b3[a]) for a in range(3)]
        x = decoder.upsamples[s](x, drop_leading_frame=b3[0][0] == 0)
        k = 1
        for stage in range(self.layers.split, len(self.layers.depths)):
            for block in decoder.det_stages[stage]:
                x = block(x)
                k += 1
            x = decoder.upsamples[stage](x, drop_leading_frame=spans[0][k][0] == 0)
            k += 1
        cut = [(lo - spans[a][-1][0], hi - spans[a][-1][0] + 1) for a, (lo, hi) in enumerate(b5)]
        return x[:, cut[0][0]:cut[0][1], cut[1][0]:cut[1][1], cut[2][0]:cut[2][1]]

    def _run_tail(self, context: torch.Tensor, b5: list[Span]) -> torch.Tensor:
        """Stage 5 (every step) on stage-5 span `b5`, with that span's slice of the shared noise field."""
        decoder, vae = self.vae.first_stage_model.decoder, self.vae
        p = self.layers.patch
        (t0, t1), (h0, h1), (w0, w1) = b5
        x_t = self.noise[:, :, t0:t1 + 1, p * h0:p * (h1 + 1), p * w0:p * (w1 + 1)]
        x_t = x_t.to(device=vae.device, dtype=vae.vae_dtype)
        timesteps = decoder.default_inference_timesteps.to(vae.device)
        steps = timesteps.shape[0]
        for i in range(steps):
            check_interrupt()
            out = decoder.forward_diff_step(context, x_t, timesteps[i].expand(x_t.shape[0]))
            if decoder.model_output_type == "x0":
                if i == steps - 1:
                    return out
                velocity = (x_t.float() - out.float()) / timesteps[i]
            else:
                velocity = out.float()
                if i == steps - 1:
                    return (x_t.float() - timesteps[i] * velocity).to(x_t.dtype)
            t_next = timesteps[i + 1] if i + 1 < steps else torch.zeros_like(timesteps[i])
            x_t = (x_t.float() - (timesteps[i] - t_next) * velocity).to(x_t.dtype)
        return x_t

    def decode_block(self, tile: Tile) -> torch.Tensor:
        """Raw pixels (before process_output) of tile `tile`, on the device."""
        spans = self.spans(tile)
        b3, b5 = [b[1] for b in spans], [b[2] for b in spans]
        span, head = self._head_for(spans[0][0])
        t, h, w = ((b3[0][0] - span[0], b3[0][1] - span[0] + 1), b3[1], b3[2])
        x = self._run_mid(head[:, t[0]:t[1], h[0]:h[1] + 1, w[0]:w[1] + 1], b3, b5)
        pixels = self._run_tail(x, b5)
        p = self.layers.patch
        starts = (b5[0][0], p * b5[1][0], p * b5[2][0])
        crop = tuple(slice(i.start - s, i.end - s) for i, s in zip(tile.intervals, starts))
        return pixels[(Ellipsis, *crop)]

    def decode_raw(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s pixels before `process_output`, (batch, channels, *tile.shape) in the VAE's dtype, cropped
        on the VAE's device (a view)."""
        import comfy.model_management as mm

        if not self._loaded:
            self.load()
            self_check(self.vae, self.layers)
        device_context = getattr(mm, "cuda_device_context", None)
        with torch.inference_mode():
            with device_context(self.vae.device) if device_context is not None else contextlib.nullcontext():
                return self.decode_block(tile).to(self.vae.vae_dtype)

    def decode_tile(self, tile: Tile) -> torch.Tensor:
        """Tile `tile`'s processed pixels (batch, channels, *tile.shape), unweighted, fp32 on the CPU."""
        return processed(self.vae, self.decode_raw(tile))


def self_check(vae: Any, layers: DiffusionLayers) -> None:
    """Refuse (VaeDecodeError) a decoder whose stages, run one by one as the tiles run them, do not give what
    its own forward gives on a small latent: this ComfyUI's decoder would compute something else. Once per
    decoder module."""
    decoder = vae.first_stage_model.decoder
    if _checked.get(decoder):
        return
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(1, int(vae.latent_channels), 3, 1, 2, generator=gen)
    plan = plan_decode((3, 1, 2), [AxisTileSize(1 << 16, 0)] * 3, (0, 0, 0), LTX_GEOMETRY)
    shape = (1, layers_out(decoder), *plan.pixel_shape)
    noise = decode_noise(vae, z, shape)
    one = DiffusionDecode(vae, z, plan, layers, (None, None), (0, 0), noise, shape)
    with torch.inference_mode():
        got = one.decode_block(plan.pixels.tiles[0]).float()
        x = z.to(device=vae.device, dtype=vae.vae_dtype)
        want = decoder(vae.first_stage_model.per_channel_statistics.un_normalize(x),
                       generator=torch.Generator(device=vae.device).manual_seed(0)).float()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
        diff = (got - want).abs().max().item() if got.shape == want.shape else f"shapes {tuple(got.shape)}"
        raise VaeDecodeError(f"this ComfyUI's LTX-2.5 diffusion decoder, run stage by stage, differs from its own "
                             f"decode ({diff}); the tiled decode would be wrong. Decode with ComfyUI's VAE Decode")
    _checked[decoder] = True


def layers_out(decoder: torch.nn.Module) -> int:
    """Pixel channels the decoder outputs."""
    return int(getattr(decoder, "out_channels", 3))


def _capped(settings: DecodeSettings, reach5: tuple[int, int]) -> tuple[int, int]:
    """`settings.context` for stage 5, at most its (time, space) reach `reach5` on each axis."""
    time, space = settings.context(reach5)
    return min(time, reach5[0]), min(space, reach5[1])
