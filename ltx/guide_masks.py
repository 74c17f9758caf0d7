"""Guide attention masks (LTXVAddGuide's `attention_mask`) cut per tile.

ComfyUI's LTX model turns a guide's pixel-space attention mask (batch, 1, pixel frames, pixel height, pixel
width) into one weight per guide token: an area mean over the pixels of each latent cell, and in time the
first pixel frame for latent frame 0 and the mean of each later group of pixel frames (repeated by nearest
neighbour when the mask has fewer frames than the latent). A tile holds a crop of the guide's tokens, so it
needs the weights of exactly those tokens. `latent_weights` computes the per-token weights once, on the full
latent grid; a crop of them, handed to the model as the tile's mask with the tile's latent shape, maps to
itself under the model's own mapping (area means over 1 x 1 cells, groups of one frame).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


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
