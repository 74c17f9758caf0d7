"""LTX-2.5's keyframe marker per tile: each tile call marks exactly the tokens the untiled call marks.

ComfyUI's LTX-2.5 transformer adds a learned marker (`keyframes_abs_pos_embedding`) to the tokens chosen by
its `keyframes_abs_pos_mask`: tokens whose pixel temporal start is 0 (the causal first frame), guide tokens
excluded, plus the latent frames that the `generated_keyframes` conditioning names (`first_latent_frame`,
`num_keyframes`, recorded at `tokens_per_frame` tokens a latent frame). It decides from the positions the call
passes in, so a temporal tile that starts mid-clip, whose normalised positions start at 0, would mark its own
first frame; a spatial tile has fewer tokens per frame than `generated_keyframes` records.

Two things keep the marker where it belongs:

* `TileKeyframeMask`, an object patch of `diffusion_model.keyframes_abs_pos_mask` on the TDP clone: inside a
  tile call it asks the model's own mask for the untiled call (global positions, every guide token excluded,
  the untiled `generated_keyframes`) and returns its crop to the tile's tokens; outside one it is the model's.
* `tile_generated_keyframes` rewrites `generated_keyframes` for the tile (its tokens per frame, the slots that
  fall in it, relative to its first frame), so the conditioning each tile carries is true of that tile.

The tile in flight lives in thread-local state (each MultiGPU device thread sees its own). The mask is decided
outside torch.compile's graph (`torch.compiler.disable`): a compiled model breaks its graph there, once per call,
instead of guarding on every tile's crop and recompiling per tile. Only checkpoints with a keyframe position
embedding call the mask.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...tiling import LatentGeometry, TilingError


@dataclass(frozen=True)
class TileTokens:
    """Where one tile call's video tokens sit in the untiled call's token grid.

    `grid` is the untiled (frames + guide frames, height, width) latent grid, `guide_frames` how many of its
    last frames are guides; the tile's tokens are rows `rows` (its frames, then the guide frames it keeps),
    cropped to `hs` x `ws`. `generated_keyframes` is the untiled call's (or None).
    """

    grid: tuple[int, int, int]
    guide_frames: int
    rows: tuple[int, ...]
    hs: slice
    ws: slice
    geometry: LatentGeometry
    generated_keyframes: dict | None = None

    def untiled_coords(self, device: torch.device) -> torch.Tensor:
        """(1, 3, tokens, 2) pixel [start, end) of every untiled token, as the model's position map gives them."""
        f, h, w = self.grid
        axes = [torch.tensor([self.geometry.pixel_bounds(i, i + 1, a) for i in range(n)], dtype=torch.float32)
                for a, n in enumerate(self.grid)]
        ff, hh, ww = torch.meshgrid(torch.arange(f), torch.arange(h), torch.arange(w), indexing="ij")
        coords = torch.stack([axes[0][ff.flatten()], axes[1][hh.flatten()], axes[2][ww.flatten()]])
        return coords.unsqueeze(0).to(device)

    def crop(self, untiled: torch.Tensor) -> torch.Tensor:
        """The tile's part of a per-token (batch, tokens) tensor of the untiled call, in the tile's token order."""
        grid = untiled.reshape(untiled.shape[0], *self.grid)
        rows = torch.tensor(self.rows, dtype=torch.long, device=untiled.device)
        return grid[:, rows][:, :, self.hs, self.ws].reshape(untiled.shape[0], -1)


_local = threading.local()
"""`tile`: the TileTokens of the tile call in flight in this thread, or None (`tile_tokens`)."""


@contextlib.contextmanager
def tile_tokens(tile: TileTokens | None) -> Iterator[None]:
    """Within the block, the patched marker mask crops the untiled mask to `tile` (None: the model decides), in this
    thread only; after it, as before."""
    before = getattr(_local, "tile", None)
    _local.tile = tile
    try:
        yield
    finally:
        _local.tile = before


class TileKeyframeMask:
    """Stands in for an LTX model's `keyframes_abs_pos_mask` (object patch on a clone): the untiled call's mask
    cropped to the tile in flight, or the model's own mask when no tile is in flight."""

    def __init__(self, inner: Any):
        self._inner = inner

    @torch.compiler.disable
    def __call__(self, pixel_coords: torch.Tensor, orig_shape: Sequence[int], grid_mask: torch.Tensor | None,
                 num_guide_tokens: int, generated_keyframes: dict | None) -> torch.Tensor:
        tile = getattr(_local, "tile", None)
        if tile is None:
            return self._inner(pixel_coords, orig_shape, grid_mask, num_guide_tokens, generated_keyframes)
        f, h, w = tile.grid
        untiled = self._inner(tile.untiled_coords(pixel_coords.device), [1, 1, f, h, w], None,
                              tile.guide_frames * h * w, tile.generated_keyframes)
        mask = tile.crop(untiled)[0]
        if grid_mask is not None:
            mask = mask[grid_mask.to(mask.device)]
        tokens = pixel_coords.shape[2]
        if mask.numel() != tokens:
            raise TilingError(f"the keyframe marker of this tile covers {mask.numel()} tokens but the model sees "
                              f"{tokens}; this LTX model lays out its tokens in a way TDP does not know")
        return mask.unsqueeze(0).expand(pixel_coords.shape[0], -1).clone()


MASK_ATTRIBUTE = "keyframes_abs_pos_mask"


def has_marker_mask(diffusion_model: Any) -> bool:
    """Whether this LTX model decides a keyframe marker mask (ComfyUI 0.32+, whether or not its checkpoint has one)."""
    return callable(getattr(type(diffusion_model), MASK_ATTRIBUTE, None))


def marker_mask_patch(diffusion_model: Any, object_patches: dict[str, Any]) -> TileKeyframeMask:
    """TDP's object patch of `diffusion_model.keyframes_abs_pos_mask` for a clone with `object_patches`: around
    another pack's patch of it on that clone if there is one, else around the model class's own method (never
    around whatever another loaded clone left applied on the shared model)."""
    current = object_patches.get("diffusion_model." + MASK_ATTRIBUTE)
    if isinstance(current, TileKeyframeMask):
        current = current._inner
    if current is None:
        current = getattr(type(diffusion_model), MASK_ATTRIBUTE).__get__(diffusion_model, type(diffusion_model))
    return TileKeyframeMask(current)


def tile_generated_keyframes(generated: dict | None, rows: Sequence[int], grid_hw: Sequence[int],
                             tile_hw: Sequence[int]) -> dict | None:
    """`generated_keyframes` for a tile whose frames are untiled `rows`: its tokens per frame, and the untiled slot
    frames it holds, numbered from its first frame (none: `num_keyframes` 0).

    The rows a tile holds increase and the slots are one interval, so the tile's slots are one run again. A record
    that does not fit the untiled latent (another tokens per frame) is returned unchanged: the model decides on
    it as it would untiled (ComfyUI's LTX-2.5 refuses it, asking to separate the generated keyframes).
    """
    if generated is None:
        return None
    h, w = (int(v) for v in grid_hw)
    if int(generated.get("tokens_per_frame", -1)) != h * w:
        return generated
    first, count = int(generated["first_latent_frame"]), int(generated["num_keyframes"])
    inside = [i for i, r in enumerate(rows) if first <= r < first + count]
    out = dict(generated)
    out["tokens_per_frame"] = int(tile_hw[0]) * int(tile_hw[1])
    out["first_latent_frame"] = inside[0] if inside else 0
    out["num_keyframes"] = len(inside)
    return out
