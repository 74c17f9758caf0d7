"""`TiledModelCall` on the LTX-2 layout, without a ComfyUI runtime: a packed (B, 1, N) video + audio latent with
`latent_shapes`, guide frames with `keyframe_idxs` and `guide_attention_entries`, temporal tiles.

The model is a stand-in whose x0 is a known function of its inputs (mocked on purpose: these tests must catch a
broken packed path on every runtime, ComfyUI 0.3.75 included, which has no LTX-2 model). Every test asserts the
numbers the blend must give.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp.ltx.model.audio import AUDIO_AVERAGE, AUDIO_HELD, pack_latents, unpack_latents
from ltx_tdp.ltx.model.guides import latent_weights
from ltx_tdp.ltx.model.call import TDPSettings, TiledModelCall
from ltx_tdp.tiling import LTX_GEOMETRY
from ltx_tdp.tiling import AxisTiling, TileCountConfig

VIDEO = (1, 128, 2, 8, 8)
AUDIO = (1, 8, 5, 16)
GEOMETRY = LTX_GEOMETRY  # (8 causal, 32, 32): the LTX-2 transformer maps its positions as the VAE does


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def layout(frames=(1, 0), height=(1, 0), width=(1, 0)) -> TileCountConfig:
    return TileCountConfig(AxisTiling(*frames), AxisTiling(*height), AxisTiling(*width))


class AffineModel:
    """x0 = 3 x + 1 on every token (video, guides and audio); audio x0 additionally times `audio_gain(call)`.
    Records what each tile call received."""

    def __init__(self, audio_gain=lambda index: 1.0):
        self.calls: list[dict] = []
        self.audio_gain = audio_gain

    def __call__(self, x: torch.Tensor, kw: dict) -> torch.Tensor:
        index = len(self.calls)
        self.calls.append({"x": x.clone(), **kw})
        out = 3 * x + 1
        shapes = kw.get("latent_shapes")
        if shapes is None or len(shapes) < 2:
            return out
        video, *extras = unpack_latents(out, shapes)
        return pack_latents([video, *[e * self.audio_gain(index) for e in extras]])


def run(call: TiledModelCall, model) -> torch.Tensor:
    flat = call.partial(model)
    return call.finish(flat, torch.float32)


def packed_inputs(video_shape=VIDEO, seed=0):
    video, audio = randn(*video_shape, seed=seed), randn(*AUDIO, seed=seed + 1)
    return video, audio, pack_latents([video, audio]), [video_shape, AUDIO]


@pytest.mark.parametrize("mode", [AUDIO_HELD, AUDIO_AVERAGE])
def test_packed_video_and_audio_2x2_blends_video_and_never_tiles_audio(mode):
    video, audio, x, shapes = packed_inputs()
    model = AffineModel(audio_gain=lambda i: float(i + 1))  # tile i predicts (i + 1) (3 a + 1)
    call = TiledModelCall(TDPSettings(layout(height=(2, 2), width=(2, 2)), True, mode), GEOMETRY, x,
                          {"latent_shapes": shapes})
    out_video, out_audio = unpack_latents(run(call, model), shapes)

    assert len(model.calls) == 4, f"{len(model.calls)} tile calls for 2 x 2 tiles"
    for c in model.calls:  # [0, 5) and [3, 8) per axis; every tile gets the whole audio
        assert [tuple(s) for s in c["latent_shapes"]] == [(1, 128, 2, 5, 5), AUDIO], c["latent_shapes"]
        assert torch.equal(unpack_latents(c["x"], c["latent_shapes"])[1], audio), "a tile got a cut or changed audio"
    err = (out_video - (3 * video + 1)).abs().max().item()
    assert err <= 1e-5, f"blended video x0 is off the pointwise x0 by {err:.3e} (windows must sum to one)"
    if mode == AUDIO_HELD:
        assert torch.equal(out_audio, audio), f"held audio x0 differs from the input by {(out_audio - audio).abs().max():.3e}"
    else:  # the mean of 1, 2, 3, 4 times (3 a + 1)
        expected = 2.5 * (3 * audio + 1)
        err = (out_audio - expected).abs().max().item()
        assert err <= 1e-5, f"averaged audio is off 2.5 (3 a + 1) by {err:.3e}"


def test_packed_latent_with_3_temporal_tiles_blends_frames_and_keeps_audio_whole():
    video, audio, x, shapes = packed_inputs(video_shape=(1, 128, 7, 4, 4), seed=3)
    model = AffineModel()
    call = TiledModelCall(TDPSettings(layout(frames=(3, 1)), True, AUDIO_HELD), GEOMETRY, x, {"latent_shapes": shapes})
    out_video, out_audio = unpack_latents(run(call, model), shapes)

    frames = [tuple(c["latent_shapes"][0])[2] for c in model.calls]
    assert frames == [3, 3, 3], f"tile frame counts {frames}; 7 frames in 3 tiles overlapping by 1 are [0,3) [2,5) [4,7)"
    starts = [torch.equal(unpack_latents(c["x"], c["latent_shapes"])[0], video[:, :, s:s + 3])
              for c, s in zip(model.calls, (0, 2, 4))]
    assert starts == [True, True, True], f"tiles do not hold frames [0,3) [2,5) [4,7): {starts}"
    err = (out_video - (3 * video + 1)).abs().max().item()
    assert err <= 1e-5, f"blended video is off by {err:.3e}"
    assert torch.equal(out_audio, audio)


def _guide_kwargs(h: int, w: int, batch: int = 1) -> dict:
    """One guide frame at time 0 covering the frame, with an attention mask of 256 x 256 pixels whose left
    half is 1 and right half 0 (LTXVAddGuide's pixel-space mask, (B, 1, frames, H, W))."""
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    starts = torch.stack([torch.zeros(h * w), ys.flatten() * 32.0, xs.flatten() * 32.0])  # (3, N)
    ends = starts + torch.tensor([1.0, 32.0, 32.0])[:, None]
    keyframe_idxs = torch.stack([starts, ends], dim=-1)[None].expand(batch, 3, h * w, 2).clone()
    pixel_mask = torch.zeros(1, 1, 1, h * 32, w * 32)
    pixel_mask[..., : w * 16] = 1.0
    entry = {"pre_filter_count": h * w, "strength": 1.0, "pixel_mask": pixel_mask, "latent_shape": [1, h, w]}
    return {"keyframe_idxs": keyframe_idxs, "guide_attention_entries": [entry]}


def test_guides_and_audio_together_cut_tokens_entries_and_masks_per_tile():
    video, audio = randn(1, 128, 2, 8, 8, seed=5), randn(*AUDIO, seed=6)
    guide = randn(1, 128, 1, 8, 8, seed=7)
    full = torch.cat([video, guide], dim=2)  # guide frames are appended at the end of the frame axis
    shapes = [tuple(full.shape), AUDIO]
    kw = {"latent_shapes": shapes, **_guide_kwargs(8, 8)}
    model = AffineModel()
    call = TiledModelCall(TDPSettings(layout(height=(2, 2), width=(2, 2)), True, AUDIO_HELD), GEOMETRY,
                          pack_latents([full, audio]), kw)
    out_full, out_audio = unpack_latents(run(call, model), shapes)

    expected_weights = latent_weights(kw["guide_attention_entries"][0]["pixel_mask"], (1, 8, 8))
    assert expected_weights[0, 0, 0, 0].tolist() == [1.0] * 4 + [0.0] * 4, expected_weights[0, 0, 0, 0]
    for c, (r0, c0) in zip(model.calls, [(0, 0), (0, 3), (3, 0), (3, 3)]):
        v, a = unpack_latents(c["x"], c["latent_shapes"])
        assert tuple(v.shape) == (1, 128, 3, 5, 5), f"tile video+guide shape {tuple(v.shape)}"
        assert torch.equal(v[:, :, 2], guide[:, :, 0, r0:r0 + 5, c0:c0 + 5]), "the tile's guide tokens are not its crop"
        assert torch.equal(a, audio)
        assert c["keyframe_idxs"].shape == (1, 3, 25, 2), tuple(c["keyframe_idxs"].shape)
        # Normalised positions: the tile's guide tokens start at pixel 0 in space.
        assert c["keyframe_idxs"][0, 1, 0, 0].item() == 0 and c["keyframe_idxs"][0, 2, 0, 0].item() == 0
        (entry,) = c["guide_attention_entries"]
        assert entry["pre_filter_count"] == 25 and entry["latent_shape"] == [1, 5, 5], entry
        mask = entry["pixel_mask"]
        assert tuple(mask.shape) == (1, 1, 1, 5, 5), tuple(mask.shape)
        assert torch.equal(mask, expected_weights[:, :, :, r0:r0 + 5, c0:c0 + 5]), \
            f"tile at ({r0}, {c0}): mask columns {mask[0, 0, 0, 0].tolist()}"
        assert torch.equal(latent_weights(mask, (1, 5, 5)), mask), "the model's own mapping must leave the tile mask as is"
    # Guide tokens kept by k tiles blend with 1/k each: still the pointwise x0.
    err = (out_full - (3 * full + 1)).abs().max().item()
    assert err <= 1e-5, f"video + guide x0 is off by {err:.3e}"
    assert torch.equal(out_audio, audio)


def test_one_tile_passes_guide_attention_entries_through_untouched():
    video, audio = randn(1, 128, 2, 8, 8, seed=5), randn(*AUDIO, seed=6)
    full = torch.cat([video, randn(1, 128, 1, 8, 8, seed=7)], dim=2)
    kw = {"latent_shapes": [tuple(full.shape), AUDIO], **_guide_kwargs(8, 8)}
    model = AffineModel()
    run(TiledModelCall(TDPSettings(layout(), True, AUDIO_HELD), GEOMETRY, pack_latents([full, audio]), kw), model)
    (c,) = model.calls
    assert c["guide_attention_entries"][0] is kw["guide_attention_entries"][0], "1 x 1 tiling must not rewrite entries"


@pytest.mark.parametrize("pixel_frames, latent_frames", [(1, 3), (9, 3), (4, 3), (2, 5)])
def test_latent_weights_follow_the_causal_frame_groups(pixel_frames, latent_frames):
    """Latent frame 0 takes pixel frame 0; later ones average their group of pixel frames (or repeat the
    nearest when there are fewer pixel frames)."""
    frames = torch.arange(pixel_frames, dtype=torch.float32)
    mask = frames.view(1, 1, -1, 1, 1).expand(1, 1, pixel_frames, 64, 64)
    weights = latent_weights(mask, (latent_frames, 2, 2))[0, 0, :, 0, 0].tolist()
    if pixel_frames == 1:
        expected = [0.0] * latent_frames
    elif (pixel_frames - 1) // (latent_frames - 1) >= 1:
        g = (pixel_frames - 1) // (latent_frames - 1)
        expected = [0.0] + [float(frames[1 + i * g:1 + (i + 1) * g].mean()) for i in range(latent_frames - 1)]
    else:
        expected = [0.0] + [float(frames[1 + int(i * (pixel_frames - 1) / (latent_frames - 1))])
                            for i in range(latent_frames - 1)]
    assert weights == pytest.approx(expected, abs=1e-6), f"{pixel_frames} px frames -> {weights}, expected {expected}"
