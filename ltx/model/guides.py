"""Guide frames (LTXVAddGuide) cut per tile: which tiles keep which guide tokens, their blend weights, their
positions (`keyframe_idxs`) and their attention entries and masks.

`LTXVAddGuide` appends guide latent frames at the end of the frame axis and records the pixel coordinates
of their tokens in `keyframe_idxs` (batch, 3, tokens[, 2]). A tile keeps a guide frame when its time interval
overlaps the tile's (or is a reference, time < 0) and takes the frame's tokens under its spatial crop:
exactly the guide tokens overlapping it on all three axes. Each token's weight is 1 / (number of tiles
keeping it).

An IC-LoRA guide with a `reference_downscale_factor` s > 1 is encoded at 1/s of the latent's size and dilated
onto the full grid: its real tokens sit at every s-th row and column, the other cells are zeros whose denoise
mask is negative, and ComfyUI's LTX model drops every token whose (batch 0) denoise mask is negative before
the transformer (its output there is 0). Cropped like any guide frame, a tile holds the real tokens under it
and the model drops the rest of its crop, as it does untiled; the tile's guide attention entry describes the
real tokens it keeps (below).

ComfyUI's LTX model turns a guide's pixel-space attention mask (batch, 1, pixel frames, pixel height, pixel
width) into one weight per surviving guide token: an area mean over the pixels of each cell of the entry's
`latent_shape` (the guide before dilation), and in time the first pixel frame for latent frame 0 and the mean
of each later group of pixel frames (repeated by nearest neighbour when the mask has fewer frames than the
latent); the k-th weight goes to the k-th surviving token. A tile holds a crop of the guide's tokens, so it
needs the weights of exactly those tokens. `GuideFrames` computes each surviving token's weight once, on the
full grid; the survivors a tile keeps form a (kept frames, rows, columns) grid, and their weights, handed to
the model as the tile's mask with that grid as its `latent_shape`, map to themselves under the model's own
mapping (area means over 1 x 1 cells, groups of one frame).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ...tiling import LatentGeometry, Tile, TilingError, conditioning_keep_mask, conditioning_weights


class GuideFrames:
    """The guide frames appended to one model call's video latent, and what each tile keeps of them.

    `video` is the call's (batch, channels, frames + guides, height, width) latent; `kwargs` its model kwargs
    (`keyframe_idxs`, `guide_attention_entries`). Guides must be whole latent frames, as LTXVAddGuide makes them.
    """

    def __init__(self, video: torch.Tensor, kwargs: dict[str, Any], geometry: LatentGeometry,
                 normalize_positions: bool):
        _, _, f_all, h, w = video.shape
        self.kwargs, self.geometry, self.normalize = kwargs, geometry, normalize_positions
        self.hw = (h, w)
        kf = kwargs.get("keyframe_idxs")
        tokens = 0 if kf is None else int(kf.shape[2])
        if tokens % (h * w):
            raise TilingError(f"{tokens} guide tokens do not make whole {h}x{w} latent frames; TDP supports guides "
                              "appended as full frames (LTXVAddGuide)")
        self.count = tokens // (h * w)
        self.video_frames = f_all - self.count
        if self.video_frames < 1:
            raise TilingError("the latent holds guide frames only")
        self._tiles: Sequence[Tile] = ()
        self._keep = self._weight = None
        self._token_weights: dict[int, torch.Tensor] = {}
        self._alive: torch.Tensor | None = None

    def alive(self) -> torch.Tensor:
        """(guide frames, height, width) bool: the guide tokens the model keeps (batch 0's denoise mask is not
        negative there; a dilated IC-LoRA guide's filler cells are dropped). Read once per model call."""
        if self._alive is None:
            h, w = self.hw
            mask = self.kwargs.get("denoise_mask")
            if not isinstance(mask, torch.Tensor) or mask.ndim != 5:
                self._alive = torch.ones(self.count, h, w, dtype=torch.bool)
            else:
                rows = mask[0, :, self.video_frames:].cpu()
                self._alive = ~(rows < 0).any(dim=0).expand(self.count, h, w)
        return self._alive

    def select(self, tiles: Sequence[Tile]) -> None:
        """Decide what each of `tiles` (a plan over the video frames) keeps; before any per-tile question."""
        self._tiles = tiles
        if self.count:
            self._keep, self._weight = self._select()

    def _bounds(self) -> torch.Tensor:
        """(G, 3, 2) pixel [start, end) of each guide frame (batch 0, first token of the frame)."""
        kf = self.kwargs["keyframe_idxs"][0].to(torch.float32)  # (3, N) or (3, N, 2)
        h, w = self.hw
        first = torch.arange(self.count, device=kf.device) * (h * w)
        if kf.ndim == 3:
            return kf[:, first, :].permute(1, 0, 2)
        starts = kf[:, first]
        ends = starts + torch.tensor(self.geometry.factors, dtype=torch.float32, device=kf.device)[:, None]
        return torch.stack([starts, ends], dim=-1).permute(1, 0, 2)

    def _select(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(tiles, G) keep mask of the guide frames, and (tiles, G, H, W) blend weights of their tokens."""
        n_tiles, (h, w) = len(self._tiles), self.hw
        bounds = self._bounds()[:, :1, :]  # time decides the frame; the spatial crop decides the tokens
        keep = torch.stack([
            conditioning_keep_mask(bounds, [self.geometry.pixel_bounds(t.intervals[0].start, t.intervals[0].end, 0)])
            for t in self._tiles
        ]).cpu()
        orphans = ~keep.any(dim=0)
        if orphans.any():  # a guide outside every tile's time span still conditions the tiles beside it in space
            keep[:, orphans] = True
        token_keep = torch.zeros(n_tiles, self.count, h, w, dtype=torch.bool)
        for tile in self._tiles:
            _, hs, ws = tile.slices
            token_keep[tile.index, :, hs, ws] = keep[tile.index, :, None, None]
        weights = conditioning_weights(token_keep.reshape(n_tiles, -1)).reshape(n_tiles, self.count, h, w)
        return keep, weights

    def kept(self, tile: Tile) -> torch.Tensor:
        """Indices (0 .. G-1) of the guide frames `tile` keeps."""
        if not self.count:
            return torch.zeros(0, dtype=torch.long)
        return torch.nonzero(self._keep[tile.index]).flatten()

    def weights(self, tile: Tile, kept: torch.Tensor) -> torch.Tensor:
        """(kept, tile h, tile w) blend weights of the guide tokens `tile` keeps."""
        _, hs, ws = tile.slices
        return self._weight[tile.index][kept][:, hs, ws]

    def keyframes(self, tile: Tile, kept: torch.Tensor) -> torch.Tensor | None:
        """The tile's `keyframe_idxs`: its kept guide tokens' positions (shifted by the tile's origin when
        positions are normalised); None when it keeps none."""
        if kept.numel() == 0:
            return None
        kf = self.kwargs["keyframe_idxs"]
        h, w = self.hw
        _, hs, ws = tile.slices
        grid = kf.reshape(kf.shape[0], kf.shape[1], self.count, h, w, *kf.shape[3:])
        grid = grid[:, :, kept.to(kf.device)][:, :, :, hs, ws]
        out = grid.reshape(kf.shape[0], kf.shape[1], -1, *kf.shape[3:])
        if self.normalize and any(tile.origin):
            offset = torch.tensor(
                [self.geometry.pixel_bounds(tile.origin[a], tile.origin[a] + 1, a)[0] for a in range(3)],
                dtype=out.dtype if out.is_floating_point() else torch.float32, device=out.device)
            out = out - offset.view(1, 3, *([1] * (out.ndim - 2)))
        return out

    def entries(self, tile: Tile, kept: torch.Tensor) -> list[dict] | None:
        """The tile's guide attention entries: per guide, the count, latent shape and attention mask of the guide
        tokens the tile keeps (guides it keeps nothing of are left out, as the model expects).

        `pre_filter_count` counts the tile's guide tokens before the model drops any; `latent_shape` is the grid
        of the surviving ones (kept frames, rows, columns: for a dilated guide the real tokens under the tile);
        `pixel_mask` holds their weights at that grid's resolution."""
        entries = self.kwargs.get("guide_attention_entries")
        if not entries:
            return entries
        keep = torch.zeros(self.count, dtype=torch.bool)
        keep[kept] = True
        (h, w), tile_hw = self.hw, tile.shape[1:]
        _, hs, ws = tile.slices
        whole_grid = tuple(tile_hw) == (h, w)
        out, frame = [], 0
        for index, entry in enumerate(entries):
            n_frames = int(entry["pre_filter_count"]) // (h * w)
            mine = keep[frame:frame + n_frames]
            first, frame = frame, frame + n_frames
            n_kept = int(mine.sum())
            if n_kept == 0:
                continue
            if whole_grid and n_kept == n_frames:
                out.append(entry)
                continue
            new = dict(entry)
            new["pre_filter_count"] = n_kept * tile_hw[0] * tile_hw[1]
            if entry.get("latent_shape") is not None:
                alive = self.alive()
                idx = torch.nonzero(mine).flatten()
                rows, cols = _survivor_grid(alive[first:frame][idx][:, hs, ws], index)
                new["latent_shape"] = [n_kept, int(rows.sum()), int(cols.sum())]
                if entry.get("pixel_mask") is not None:
                    weights = self._weights_of(index, entry, alive[first:frame])
                    crop = weights[:, :, idx.to(weights.device)][..., hs, ws]
                    new["pixel_mask"] = crop[..., rows.to(crop.device), :][..., cols.to(crop.device)]
            out.append(new)
        return out

    def _weights_of(self, index: int, entry: dict, alive: torch.Tensor) -> torch.Tensor:
        """(batch, 1, frames, height, width) weight of each surviving token of guide `index` on the full grid, as
        the model assigns them: its per-token weights of the entry's `latent_shape`, in token order (0 elsewhere)."""
        if index not in self._token_weights:
            per_token = latent_weights(entry["pixel_mask"], entry["latent_shape"])
            per_token = per_token.reshape(per_token.shape[0], -1)
            survivors = int(alive.sum())
            if per_token.shape[1] != survivors:
                raise TilingError(
                    f"guide {index + 1}'s attention mask gives {per_token.shape[1]} token weights (latent_shape "
                    f"{list(entry['latent_shape'])}) for {survivors} guide tokens the model keeps, so TDP cannot tell "
                    "which token each weight belongs to; add the guide with ComfyUI's LTXVAddGuide")
            full = torch.zeros(per_token.shape[0], 1, *alive.shape, dtype=per_token.dtype, device=per_token.device)
            full.view(per_token.shape[0], -1)[:, alive.flatten().to(per_token.device)] = per_token
            self._token_weights[index] = full
        return self._token_weights[index]


def _survivor_grid(alive: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) bool masks of the surviving tokens of a tile's (frames, height, width) crop of one guide,
    which must be the same whole grid in every frame (a crop of a dilated guide's lattice always is)."""
    rows, cols = alive[0].any(dim=1), alive[0].any(dim=0)
    grid = rows[:, None] & cols[None, :]
    if not bool((alive == grid).all()):
        raise TilingError(
            f"the tokens the model keeps of guide {index + 1} do not form the same grid in every frame of a tile, so "
            "TDP cannot give the tile its attention mask; add IC-LoRA guides with ComfyUI's LTXVAddGuide (whole "
            "frames, dilated by the reference_downscale_factor)")
    return rows, cols


def latent_weights(pixel_mask: torch.Tensor, latent_shape: Sequence[int]) -> torch.Tensor:
    """(batch, 1, f, h, w) per-token weights of a (batch, 1, F, H, W) pixel mask on an (f, h, w) latent grid.

    A mask already at latent resolution is returned unchanged (in value).
    """
    f_lat, h_lat, w_lat = (int(v) for v in latent_shape)
    b, _, f_pix, h_pix, w_pix = pixel_mask.shape
    frames = pixel_mask.reshape(b * f_pix, 1, h_pix, w_pix)
    spatial = F.interpolate(frames, size=(h_lat, w_lat), mode="area").reshape(b, 1, f_pix, h_lat, w_lat)
    first = spatial[:, :, :1]
    if f_lat == 1 or f_pix == 1:
        rest = first.expand(b, 1, f_lat - 1, h_lat, w_lat) if f_pix == 1 else spatial[:, :, 1:1]
        return torch.cat([first, rest], dim=2)
    group = (f_pix - 1) // (f_lat - 1)
    if group < 1:
        tail = spatial[:, :, 1:].permute(0, 3, 4, 1, 2).reshape(b * h_lat * w_lat, 1, f_pix - 1)
        tail = F.interpolate(tail, size=f_lat - 1, mode="nearest")
        rest = tail.reshape(b, h_lat, w_lat, 1, f_lat - 1).permute(0, 3, 4, 1, 2)
    else:
        usable = spatial[:, :, 1:1 + (f_lat - 1) * group]
        rest = usable.reshape(b, 1, f_lat - 1, group, h_lat, w_lat).mean(dim=3)
    return torch.cat([first, rest], dim=2)
