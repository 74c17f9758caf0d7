"""One LTX / LTX-2 model call cut into per-tile model calls and blended back.

`TiledModelCall` knows the layout of an LTX latent as ComfyUI hands it to `apply_model`: video
(B, C, F, H, W) with guide frames appended at the end of the frame axis (their positions in
`keyframe_idxs`), or for LTX-2 a packed (B, 1, N) video + audio with `latent_shapes`. It validates the
tiling against the actual video, cuts latent, denoise mask, guide tokens and guide attention entries per
tile, runs a caller-supplied `call(x, kwargs)` per tile, and blends x0 with `tiling.blend_tiles`.

`partial(call, rank, world)` returns one rank's weighted sums as a single flat fp32 buffer (so a group
needs exactly one all_reduce); `finish(buffer)` turns the summed buffer into the model's output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..tiling import AXES, Tile, TileCountConfig, TilePlan, TilingError, blend_tiles, conditioning_keep_mask, conditioning_weights, plan_tiles
from .audio import AUDIO_AVERAGE, AUDIO_HELD, pack_latents, unpack_latents
from .guide_masks import latent_weights
from .positions import grid_shift, shifted_grid

log = logging.getLogger(__name__)

ModelCall = Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]


@dataclass(frozen=True)
class TDPSettings:
    """What the TDP patcher node configures. `audio_mode` is one of ltx.audio.AUDIO_MODES."""

    tiling: TileCountConfig
    normalize_positions: bool = True
    audio_mode: str = AUDIO_HELD


@dataclass(frozen=True)
class ModelGeometry:
    """What the tiler needs to know of the diffusion model: its VAE scale factors and causal time fix."""

    scale: tuple[int, int, int] = (8, 32, 32)
    causal_time: bool = False

    def pixel_bounds(self, start: int, end: int, axis: int) -> tuple[float, float]:
        """Pixel [start, end) of latent cells [start, end) on `axis`, as the model maps them."""
        s = self.scale[axis]
        if axis == 0 and self.causal_time:
            return float(max(s * start + 1 - s, 0)), float(max(s * end + 1 - s, 0))
        return float(s * start), float(s * end)


def _crop(t: torch.Tensor, frames: slice | list[int] | torch.Tensor, hs: slice, ws: slice) -> torch.Tensor:
    """Crop the trailing (F, H, W) axes of `t`, leaving axes of size 1 (broadcast masks) whole."""
    f_ix = frames if t.shape[-3] > 1 else slice(None)
    h_ix = hs if t.shape[-2] > 1 else slice(None)
    w_ix = ws if t.shape[-1] > 1 else slice(None)
    return t[..., f_ix, :, :][..., h_ix, w_ix]


class TiledModelCall:
    """One model call's inputs, cut per tile. Build it once per call; run `partial` then `finish`."""

    def __init__(self, settings: TDPSettings, geometry: ModelGeometry, x: torch.Tensor, kwargs: dict[str, Any]):
        self.settings = settings
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
        _, _, f_all, h, w = self.video.shape
        kf = kwargs.get("keyframe_idxs")
        n_guide_tokens = 0 if kf is None else int(kf.shape[2])
        if n_guide_tokens % (h * w):
            raise TilingError(
                f"{n_guide_tokens} guide tokens do not make whole {h}x{w} latent frames; TDP supports guides "
                f"appended as full frames (LTXVAddGuide)"
            )
        self.guide_frames = n_guide_tokens // (h * w)
        self.video_frames = f_all - self.guide_frames
        if self.video_frames < 1:
            raise TilingError("the latent holds guide frames only")
        self.plan: TilePlan = plan_tiles((self.video_frames, h, w), settings.tiling.axes, AXES)
        self.tiles = self.plan.tiles
        self._guide_keep, self._guide_weight = self._select_guides()

    # -- guides ---------------------------------------------------------------------------------------------
    def _guide_bounds(self) -> torch.Tensor:
        """(G, 3, 2) pixel [start, end) of each guide frame (batch 0, first token of the frame)."""
        kf = self.kwargs["keyframe_idxs"][0].to(torch.float32)  # (3, N) or (3, N, 2)
        _, _, _, h, w = self.video.shape
        first = torch.arange(self.guide_frames, device=kf.device) * (h * w)
        if kf.ndim == 3:
            return kf[:, first, :].permute(1, 0, 2)
        starts = kf[:, first]
        ends = starts + torch.tensor(self.geometry.scale, dtype=torch.float32, device=kf.device)[:, None]
        return torch.stack([starts, ends], dim=-1).permute(1, 0, 2)

    def _select_guides(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(tiles, G) keep mask of the guide frames, and (tiles, G, H, W) blend weights of their tokens.

        A tile keeps a guide frame when its time interval overlaps the tile's (or is a reference, time < 0)
        and takes the frame's tokens under its spatial crop: exactly the guide tokens overlapping it on all
        three axes. Each token's weight is 1 / (number of tiles keeping it).
        """
        n_tiles, g = len(self.tiles), self.guide_frames
        _, _, _, h, w = self.video.shape
        if g == 0:
            return torch.zeros(n_tiles, 0, dtype=torch.bool), torch.zeros(n_tiles, 0, h, w)
        bounds = self._guide_bounds()[:, :1, :]  # time decides the frame; the spatial crop decides the tokens
        keep = torch.stack([
            conditioning_keep_mask(bounds, [self.geometry.pixel_bounds(t.intervals[0].start, t.intervals[0].end, 0)])
            for t in self.tiles
        ]).cpu()
        orphans = ~keep.any(dim=0)
        if orphans.any():  # a guide outside every tile's time span still conditions the tiles beside it in space
            keep[:, orphans] = True
        token_keep = torch.zeros(n_tiles, g, h, w, dtype=torch.bool)
        for tile in self.tiles:
            _, hs, ws = tile.slices
            token_keep[tile.index, :, hs, ws] = keep[tile.index, :, None, None]
        weights = conditioning_weights(token_keep.reshape(n_tiles, -1)).reshape(n_tiles, g, h, w)
        return keep, weights

    def _guide_entries(self, kept: torch.Tensor, hs: slice, ws: slice, tile_hw: tuple[int, int]) -> list[dict] | None:
        """The guide attention entries of one tile: per guide, the count, latent shape and attention mask of
        the guide tokens the tile keeps (guides it keeps nothing of are left out, as the model expects)."""
        entries = self.kwargs.get("guide_attention_entries")
        if not entries:
            return entries
        _, _, _, h, w = self.video.shape
        whole_grid = tuple(tile_hw) == (h, w)
        out, frame = [], 0
        for entry in entries:
            n_frames = int(entry["pre_filter_count"]) // (h * w)
            mine = kept[frame:frame + n_frames]
            frame += n_frames
            n_kept = int(mine.sum())
            if n_kept == 0:
                continue
            if whole_grid and n_kept == n_frames:
                out.append(entry)
                continue
            new = dict(entry)
            new["pre_filter_count"] = n_kept * tile_hw[0] * tile_hw[1]
            latent_shape = entry.get("latent_shape")
            if latent_shape is not None:
                new["latent_shape"] = [n_kept, tile_hw[0], tile_hw[1]]
            mask = entry.get("pixel_mask")
            if mask is not None and latent_shape is not None:
                weights = latent_weights(mask, (n_frames, h, w))
                idx = torch.nonzero(mine).flatten().to(weights.device)
                new["pixel_mask"] = weights[:, :, idx][..., hs, ws]
            out.append(new)
        return out

    # -- one tile ---------------------------------------------------------------------------------------------
    def tile_inputs(self, tile: Tile) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """The model input and kwargs of one tile, and the indices of the guide frames it keeps."""
        fs, hs, ws = tile.slices
        kept = self._guide_keep[tile.index]
        kept_idx = torch.nonzero(kept).flatten()
        guide_rows = (self.video_frames + kept_idx).tolist()
        frames = list(range(fs.start, fs.stop)) + guide_rows
        video = _crop(self.video, frames, hs, ws) if guide_rows else self.video[..., fs, hs, ws]
        kw = dict(self.kwargs)
        mask = kw.get("denoise_mask")
        if isinstance(mask, torch.Tensor) and mask.ndim == 5:
            kw["denoise_mask"] = _crop(mask, frames, hs, ws) if guide_rows else _crop(mask, fs, hs, ws)
        kf = kw.get("keyframe_idxs")
        if kf is not None:
            kw["keyframe_idxs"] = self._tile_keyframes(kf, kept_idx, tile)
            if "guide_attention_entries" in kw:
                kw["guide_attention_entries"] = self._guide_entries(kept, hs, ws, tile.shape[1:])
            if kw["keyframe_idxs"] is None:
                kw.pop("keyframe_idxs")
                kw.pop("guide_attention_entries", None)
        if self.packed:
            x = pack_latents([video, *self.extras])
            kw["latent_shapes"] = [tuple(video.shape), *self.shapes[1:]]
        else:
            x = video
        return x, kw, kept_idx

    def _tile_keyframes(self, kf: torch.Tensor, kept_idx: torch.Tensor, tile: Tile) -> torch.Tensor | None:
        if kept_idx.numel() == 0:
            return None
        _, _, _, h, w = self.video.shape
        _, hs, ws = tile.slices
        grid = kf.reshape(kf.shape[0], kf.shape[1], self.guide_frames, h, w, *kf.shape[3:])
        grid = grid[:, :, kept_idx.to(kf.device)][:, :, :, hs, ws]
        out = grid.reshape(kf.shape[0], kf.shape[1], -1, *kf.shape[3:])
        if self.settings.normalize_positions and any(tile.origin):
            offset = torch.tensor(
                [self.geometry.pixel_bounds(tile.origin[a], tile.origin[a] + 1, a)[0] for a in range(3)],
                dtype=out.dtype if out.is_floating_point() else torch.float32, device=out.device)
            out = out - offset.view(1, 3, *([1] * (out.ndim - 2)))
        return out

    # -- the loop ---------------------------------------------------------------------------------------------
    def buffer_numel(self) -> int:
        audio = sum(e.numel() for e in self.extras) if self.settings.audio_mode == AUDIO_AVERAGE else 0
        return self.video.numel() + audio

    def partial(self, call: ModelCall, rank: int = 0, world: int = 1,
                before_tile: Callable[[Tile], None] | None = None,
                on_tile: Callable[[int, int, Tile], None] | None = None) -> torch.Tensor:
        """This rank's window-weighted sums as one flat fp32 buffer; the sum over ranks is the blend.

        Layout: the video latent (guide frames included) then, in "average" audio mode, each extra
        (audio) latent. A rank without tiles returns zeros.
        """
        flat = torch.zeros(self.buffer_numel(), dtype=torch.float32, device=self.video.device)
        video_acc = flat[: self.video.numel()].view(self.video.shape)
        extra_accs, at = [], self.video.numel()
        if self.settings.audio_mode == AUDIO_AVERAGE:
            for e in self.extras:
                extra_accs.append(flat[at:at + e.numel()].view(e.shape))
                at += e.numel()
        n_tiles = len(self.tiles)

        def evaluate(tile: Tile) -> torch.Tensor:
            x, kw, kept_idx = self.tile_inputs(tile)
            _, hs, ws = tile.slices
            with shifted_grid(grid_shift(tile.origin, self.settings.normalize_positions,
                                         self.geometry.causal_time, self.geometry.scale[0])):
                out = call(x, kw)
            if self.packed:
                parts = unpack_latents(out, kw["latent_shapes"])
                video_out, extras_out = parts[0], parts[1:]
            else:
                video_out, extras_out = out, []
            n_video = tile.shape[0]
            if kept_idx.numel():
                weights = self._guide_weight[tile.index][kept_idx][:, hs, ws].to(video_acc.device)
                rows = self.video_frames + kept_idx.to(video_acc.device)
                video_acc[:, :, rows, hs, ws] += video_out[:, :, n_video:].to(torch.float32) * weights
            for acc, e in zip(extra_accs, extras_out):
                acc += e.to(torch.float32) / n_tiles
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
            # keeps the audio exactly where it is (ltx.audio).
            extras = [e.to(dtype) for e in self.extras]
        return pack_latents([video, *extras])
