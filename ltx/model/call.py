"""One LTX / LTX-2 model call cut into per-tile model calls and blended back.

`TiledModelCall` knows the layout of an LTX latent as ComfyUI hands it to `apply_model`: video
(B, C, F, H, W) with guide frames appended at the end of the frame axis (their positions in
`keyframe_idxs`), or for LTX-2 a packed (B, 1, N) video + audio with `latent_shapes`. It validates the
tiling against the actual video, cuts latent, denoise mask, guide tokens and guide attention entries per
tile, runs a caller-supplied `call(x, kwargs)` per tile, and blends x0 with `tiling.blend_tiles`.

`partial(call, rank, world)` returns one rank's weighted sums as a single flat float64 buffer (so a group
needs exactly one all_reduce); `finish(buffer)` turns the summed buffer into the model's output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import (VIDEO_AXES, LatentGeometry, Tile, TilePlan, TilingConfig, TilingError, blend_tiles,
                       exact_sum_dtype, plan_tiles)
from .audio import AUDIO_AVERAGE, AUDIO_HELD, pack_latents, unpack_latents
from .guides import GuideFrames
from .keyframes import TileTokens, tile_generated_keyframes, tile_tokens
from .positions import grid_shift, shifted_grid

log = logging.getLogger(__name__)

ModelCall = Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]


@dataclass(frozen=True)
class TDPSettings:
    """What the TDP patcher node configures. `tiling` is a count or a size config (it is planned on each call's
    latent); `audio_mode` is one of ltx.model.audio.AUDIO_MODES."""

    tiling: TilingConfig
    normalize_positions: bool = True
    audio_mode: str = AUDIO_HELD


def _crop(t: torch.Tensor, frames: slice | list[int] | torch.Tensor, hs: slice, ws: slice) -> torch.Tensor:
    """Crop the trailing (F, H, W) axes of `t`, leaving axes of size 1 (broadcast masks) whole."""
    f_ix = frames if t.shape[-3] > 1 else slice(None)
    h_ix = hs if t.shape[-2] > 1 else slice(None)
    w_ix = ws if t.shape[-1] > 1 else slice(None)
    return t[..., f_ix, :, :][..., h_ix, w_ix]


class TiledModelCall:
    """One model call's inputs, cut per tile. Build it once per call; run `partial` then `finish`.

    `geometry` is the model's own latent-to-pixel map (its `vae_scale_factors` and causal time fix).
    `sum_dtype` is the dtype of the partial sums (default `tiling.exact_sum_dtype`: float64, so that every
    split of the tiles over ranks sums to the same bits); the output is cast back to the model's dtype.
    """

    def __init__(self, settings: TDPSettings, geometry: LatentGeometry, x: torch.Tensor, kwargs: dict[str, Any],
                 sum_dtype: torch.dtype | None = None):
        self.settings = settings
        self.sum_dtype = sum_dtype or exact_sum_dtype(x.device)
        self.geometry = geometry
        self.kwargs = kwargs
        shapes = kwargs.get("latent_shapes")
        self.packed = shapes is not None and len(shapes) > 1
        if self.packed:
            self.shapes = [tuple(int(v) for v in s) for s in shapes]
            parts = unpack_latents(x, self.shapes)
            self.video, self.extras = parts[0], parts[1:]
        else:
            self.shapes = [tuple(x.shape)]
            self.video, self.extras = x, []
        if self.video.ndim != 5:
            raise TilingError(
                f"TDP tiles video latents (batch, channels, frames, height, width); this model call got a "
                f"{self.video.ndim}-D latent of shape {tuple(self.video.shape)}. Is this an LTX video model?"
            )
        _, _, _, h, w = self.video.shape
        self.guides = GuideFrames(self.video, kwargs, geometry, settings.normalize_positions)
        self.video_frames = self.guides.video_frames
        self.plan: TilePlan = plan_tiles((self.video_frames, h, w), settings.tiling.axes, VIDEO_AXES)
        self.tiles = self.plan.tiles
        self.guides.select(self.tiles)

    # -- one tile ---------------------------------------------------------------------------------------------
    def tile_inputs(self, tile: Tile) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """The model input and kwargs of one tile, and the indices of the guide frames it keeps."""
        fs, hs, ws = tile.slices
        kept_idx = self.guides.kept(tile)
        guide_rows = (self.video_frames + kept_idx).tolist()
        frames = list(range(fs.start, fs.stop)) + guide_rows
        video = _crop(self.video, frames, hs, ws) if guide_rows else self.video[..., fs, hs, ws]
        kw = dict(self.kwargs)
        mask = kw.get("denoise_mask")
        if isinstance(mask, torch.Tensor) and mask.ndim == 5:
            kw["denoise_mask"] = _crop(mask, frames, hs, ws) if guide_rows else _crop(mask, fs, hs, ws)
        if kw.get("keyframe_idxs") is not None:
            kw["keyframe_idxs"] = self.guides.keyframes(tile, kept_idx)
            if "guide_attention_entries" in kw:
                kw["guide_attention_entries"] = self.guides.entries(tile, kept_idx)
            if kw["keyframe_idxs"] is None:
                kw.pop("keyframe_idxs")
                kw.pop("guide_attention_entries", None)
        if kw.get("generated_keyframes") is not None and self.tile_tokens(tile, frames) is not None:
            kw["generated_keyframes"] = tile_generated_keyframes(kw["generated_keyframes"], frames,
                                                                 self.video.shape[-2:], tile.shape[1:])
        if self.packed:
            x = pack_latents([video, *self.extras])
            kw["latent_shapes"] = [tuple(video.shape), *self.shapes[1:]]
        else:
            x = video
        return x, kw, kept_idx

    def tile_tokens(self, tile: Tile, frames: list[int]) -> TileTokens | None:
        """Where the tile's tokens sit in this call (ltx.model.keyframes); None for a tile that is the whole call."""
        _, _, f_all, h, w = self.video.shape
        if len(frames) == f_all and tuple(tile.shape[1:]) == (h, w):
            return None
        _, hs, ws = tile.slices
        return TileTokens((f_all, h, w), self.guides.count, tuple(frames), hs, ws, self.geometry,
                          self.kwargs.get("generated_keyframes"))

    # -- the loop ---------------------------------------------------------------------------------------------
    def buffer_numel(self) -> int:
        audio = sum(e.numel() for e in self.extras) if self.settings.audio_mode == AUDIO_AVERAGE else 0
        return self.video.numel() + audio

    def partial(self, call: ModelCall, rank: int = 0, world: int = 1,
                before_tile: Callable[[Tile], None] | None = None,
                on_tile: Callable[[int, int, Tile], None] | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """This rank's window-weighted sums as one flat `sum_dtype` buffer; the sum over ranks is the blend.

        Layout: the video latent (guide frames included) then, in "average" audio mode, each extra
        (audio) latent. A rank without tiles returns zeros. `out` (zeros of that layout) is summed into
        and returned when given.
        """
        flat = out
        if flat is None:
            flat = torch.zeros(self.buffer_numel(), dtype=self.sum_dtype, device=self.video.device)
        video_acc = flat[: self.video.numel()].view(self.video.shape)
        extra_accs, at = [], self.video.numel()
        if self.settings.audio_mode == AUDIO_AVERAGE:
            for e in self.extras:
                extra_accs.append(flat[at:at + e.numel()].view(e.shape))
                at += e.numel()
        n_tiles = len(self.tiles)

        def evaluate(tile: Tile) -> torch.Tensor:
            x, kw, kept_idx = self.tile_inputs(tile)
            fs, hs, ws = tile.slices
            frames = list(range(fs.start, fs.stop)) + (self.video_frames + kept_idx).tolist()
            with shifted_grid(grid_shift(tile.origin, self.settings.normalize_positions, self.geometry.frames)), \
                    tile_tokens(self.tile_tokens(tile, frames)):
                out = call(x, kw)
            if self.packed:
                parts = unpack_latents(out, kw["latent_shapes"])
                video_out, extras_out = parts[0], parts[1:]
            else:
                video_out, extras_out = out, []
            n_video = tile.shape[0]
            if kept_idx.numel():
                weights = self.guides.weights(tile, kept_idx).to(video_acc.device)
                rows = self.video_frames + kept_idx.to(video_acc.device)
                video_acc[:, :, rows, hs, ws] += video_out[:, :, n_video:].to(flat.dtype) * weights
            for acc, e in zip(extra_accs, extras_out):
                acc += e.to(flat.dtype) / n_tiles
            return video_out[:, :, :n_video]

        blend_tiles(self.plan, evaluate, rank=rank, world=world, out=video_acc,
                    before_tile=before_tile, on_tile=on_tile)
        return flat

    def finish(self, flat: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The model output from the reduced buffer: blended video x0 (and audio per the audio mode)."""
        video = flat[: self.video.numel()].view(self.video.shape).to(dtype)
        if not self.packed:
            return video
        if self.settings.audio_mode == AUDIO_AVERAGE:
            extras, at = [], self.video.numel()
            for e in self.extras:
                extras.append(flat[at:at + e.numel()].view(e.shape).to(dtype))
                at += e.numel()
        else:
            # Held: the sampler's denoise mask is 0 on the audio, so the audio these tiles saw is the clean
            # input and ComfyUI replaces whatever x0 is returned for it by that input; returning the input
            # keeps the audio exactly where it is (ltx.model.audio).
            extras = [e.to(dtype) for e in self.extras]
        return pack_latents([video, *extras])
