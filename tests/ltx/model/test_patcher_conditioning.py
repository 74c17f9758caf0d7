"""The TDP patcher on a real ComfyUI with tiny real LTXV models: what each tile receives besides its crop. The
positions the model computes at the diffusion-model boundary, guides (LTXVAddGuide, reference tokens, attention
entries with a mask) reaching exactly the tiles they overlap, and an i2v first frame kept as conditioned.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import (PROBE_KEY, call_model, conditioning, ksample, load_ltxv, load_vae, patch,
                                        probe_tile_calls, randn, tiling)


def _position_probe(model_patcher, seen: list):
    """A DIFFUSION_MODEL wrapper (the diffusion-model boundary) that records the pixel positions the model
    computes for the tokens it receives, with the model's own patchifier and coordinate mapping."""
    import comfy.patcher_extension as ext
    from comfy.ldm.lightricks.symmetric_patchifier import latent_to_pixel_coords

    def wrapper(executor, x, *args, **kwargs):
        dm = executor.class_obj
        _, coords = dm.patchifier.patchify(x)
        pixel = latent_to_pixel_coords(coords, dm.vae_scale_factors, causal_fix=dm.causal_temporal_positioning)
        pixel = pixel[..., 0] if pixel.ndim == 4 else pixel  # newer ComfyUI: [start, end) pairs
        seen.append(pixel[0].reshape(3, *x.shape[2:]).clone())
        return executor(x, *args, **kwargs)

    model_patcher.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, PROBE_KEY, wrapper)
    return model_patcher


@pytest.fixture(scope="module")
def causal_model(comfy, comfy_base: Path):
    from comfy.sd import load_diffusion_model
    from ltx_tdp_devkit import tiny_models

    path = tiny_models.build_ltxv(comfy_base / "models" / "causal_ltxv.safetensors", seed=1,
                                  causal_temporal_positioning=True)
    model = load_diffusion_model(str(path))
    assert model.model.diffusion_model.causal_temporal_positioning
    return model


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "global"])
def test_positions_at_the_diffusion_model_boundary(causal_model, normalize):
    layout = tiling(frames=(2, 1), height=(2, 2), width=(1, 0))
    seen: list = []
    model = _position_probe(patch(causal_model, layout, normalize=normalize), seen)
    call_model(model, randn(1, 128, 5, 10, 4, seed=6), 0.5)
    assert len(seen) == 4
    # Tile 3 starts at latent frame 2, row 5 (frames [0,3) [2,5); rows [0,6) [4,10) with overlap 2... ).
    from ltx_tdp.tiling import AxisTiling

    rows = AxisTiling(2, 2).intervals(10)
    last = seen[3]
    if normalize:
        assert last[0, :, 0, 0].tolist() == [0, 8, 16], "a temporal tile's frames sit 8 pixel frames apart from 0"
        assert last[1, 0, :, 0].tolist() == [32 * r for r in range(rows[1].length)]
        assert int(last[2].min()) == 0
    else:
        assert last[0, :, 0, 0].tolist() == [9, 17, 25], "global causal time of latent frames 2, 3, 4"
        assert last[1, 0, :, 0].tolist() == [32 * r for r in range(rows[1].start, rows[1].end)]
    first = seen[0]
    assert first[0, :, 0, 0].tolist() == [0, 1, 9], "the first temporal tile keeps the causal first frame"


def test_guides_reach_exactly_the_tiles_they_overlap(comfy, model_names, comfy_base):
    vae = load_vae(model_names)
    pos, neg = conditioning(1), conditioning(2)
    latent = {"samples": torch.zeros(1, 128, 5, 4, 6)}  # 33 frames of 128x192
    image = torch.rand(1, 128, 192, 3, generator=torch.Generator().manual_seed(0))
    for frame_idx in (0, 24):  # one guide at the first frame, one mid-clip (latent frame 3)
        pos, neg, latent = comfy.run_node("LTXVAddGuide", positive=pos, negative=neg, vae=vae, latent=latent,
                                          image=image, frame_idx=frame_idx, strength=1.0)
    assert latent["samples"].shape[2] == 7, "LTXVAddGuide appends one latent frame per guide image"
    model = patch(load_ltxv(comfy, model_names), tiling(frames=(2, 1), width=(2, 2)))
    calls: list = []
    probe_tile_calls(model, calls)
    ksample(comfy, model, latent, positive=pos, negative=neg, steps=1, denoise=0.5)
    # Video frames [0,3) and [2,5) -> pixel time [0, 17) and [9, 33); guide times are 0 and 24.
    assert len(calls) == 4
    for i, call in enumerate(calls):
        kf = call["keyframe_idxs"]
        kf = kf[..., 0] if kf.ndim == 4 else kf  # newer ComfyUI: [start, end) pairs; compare the starts
        n_guide_frames = kf.shape[2] // (call["x"].shape[-2] * call["x"].shape[-1])
        times = sorted(set(int(v) for v in kf[0, 0].flatten().tolist()))
        frame_tile = i // 2
        assert call["x"].shape[2] == 3 + n_guide_frames
        if frame_tile == 0:
            assert n_guide_frames == 1, f"tile {i}: the frame-0 guide only, got {times}"
        else:
            assert n_guide_frames == 1 and times[0] > 0, f"tile {i}: the mid-clip guide only, got {times}"
        # Space: the tile's guide tokens are the guide's tokens under the tile, shifted to the tile's origin.
        assert int(kf[0, 2].min()) == 0 and int(kf[0, 2].max()) == 32 * (call["x"].shape[-1] - 1)


def test_reference_tokens_with_negative_time_reach_every_tile(comfy, model_names):
    model = patch(load_ltxv(comfy, model_names), tiling(frames=(2, 1), height=(2, 1)))
    calls: list = []
    probe_tile_calls(model, calls, replace_output=True)
    b, f, h, w = 1, 4, 4, 3
    x = randn(b, 128, f + 1, h, w, seed=7)  # one appended guide frame
    hh, ww = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    kf = torch.stack([torch.full((h * w,), -8), hh.flatten() * 32, ww.flatten() * 32])[None]
    out = call_model(model, x, 0.5, keyframe_idxs=kf, denoise_mask=torch.ones(b, 1, f + 1, h, w))
    assert len(calls) == 4
    assert all(c["x"].shape[2] == c_frames + 1 for c, c_frames in zip(calls, [3, 3, 2, 2])), \
        [tuple(c["x"].shape) for c in calls]
    # Every tile keeps the whole reference frame (its space cropped), each token with weight 1 / (tiles keeping it).
    err = (out - x).abs().max().item()
    assert err <= 1e-6 * x.abs().max().item(), f"reference frame did not blend back to itself: {err:.3e}"


def test_i2v_conditioned_first_frame_stays_as_conditioned(comfy, model_names):
    vae = load_vae(model_names)
    image = torch.rand(1, 128, 192, 3, generator=torch.Generator().manual_seed(1))
    pos, neg, latent = comfy.run_node("LTXVImgToVideo", positive=conditioning(1), negative=conditioning(2),
                                      vae=vae, image=image, width=192, height=128, length=25, batch_size=1,
                                      strength=1.0)
    base = load_ltxv(comfy, model_names)
    model = patch(base, tiling(frames=(2, 1), width=(2, 2)))
    calls: list = []
    probe_tile_calls(model, calls)
    out = ksample(comfy, model, latent, positive=pos, negative=neg, steps=2, denoise=1.0)
    unpatched = ksample(comfy, base, latent, positive=pos, negative=neg, steps=2, denoise=1.0)
    # The sampler's own mask arithmetic rounds the kept frame by up to ~1e-6, tiled or not.
    drift = (out[:, :, 0] - latent["samples"][:, :, 0]).abs().max().item()
    assert drift <= 2e-6, f"the conditioned first frame moved by {drift:.3e}"
    assert torch.equal(out[:, :, 0], unpatched[:, :, 0]), "tiling changed the conditioned first frame"
    assert not torch.equal(out[:, :, 1:], latent["samples"][:, :, 1:])
    first_tile_mask = calls[0]["denoise_mask"]
    assert float(first_tile_mask[:, :, 0].max()) == 0.0 and float(first_tile_mask[:, :, 1:].min()) == 1.0


def _add_masked_guide(comfy, vae, latent: dict) -> tuple:
    """LTXVAddGuide with a pixel attention mask whose left half is 1 (newer ComfyUI: guide attention entries)."""
    import inspect

    node = comfy.node_class("LTXVAddGuide")
    if "attention_mask" not in inspect.signature(node.execute).parameters:
        pytest.skip(f"ComfyUI {comfy.comfyui_version()}'s LTXVAddGuide has no attention_mask (guide attention "
                    "entries came with the LTX-2 era ComfyUI)")
    image = torch.rand(1, 128, 192, 3, generator=torch.Generator().manual_seed(2))
    mask = torch.zeros(1, 128, 192)
    mask[..., :96] = 1.0
    return comfy.run_node("LTXVAddGuide", positive=conditioning(1), negative=conditioning(2), vae=vae, latent=latent,
                          image=image, frame_idx=0, strength=1.0, attention_mask=mask)


def test_masked_guide_attention_entries_one_tile_is_bit_identical_and_tiles_get_their_crop(comfy, model_names):
    from ltx_tdp.ltx.model.guides import latent_weights

    vae = load_vae(model_names)
    pos, neg, latent = _add_masked_guide(comfy, vae, {"samples": randn(1, 128, 2, 4, 6, seed=9)})
    base = load_ltxv(comfy, model_names)
    reference = ksample(comfy, base, latent, positive=pos, negative=neg, steps=1, denoise=0.5)
    assert torch.equal(ksample(comfy, patch(base, tiling()), latent, positive=pos, negative=neg, steps=1, denoise=0.5),
                       reference), "1 x 1 tiling with guide attention entries differs from the unpatched model"

    model = patch(base, tiling(width=(2, 2)))  # width 6 -> [0, 4) and [2, 6)
    calls: list = []
    probe_tile_calls(model, calls)
    out = ksample(comfy, model, latent, positive=pos, negative=neg, steps=1, denoise=0.5)
    assert torch.isfinite(out).all()
    (full_entry,) = pos[0][1]["guide_attention_entries"]
    full = latent_weights(full_entry["pixel_mask"], (1, 4, 6))
    assert full[0, 0, 0, 0].tolist() == [1, 1, 1, 0, 0, 0], full[0, 0, 0, 0]
    assert len(calls) == 2
    for call, c0 in zip(calls, (0, 2)):
        (entry,) = call["guide_attention_entries"]
        assert entry["pre_filter_count"] == 16 and list(entry["latent_shape"]) == [1, 4, 4], entry
        assert torch.equal(entry["pixel_mask"].cpu(), full[..., c0:c0 + 4]), \
            f"tile at column {c0}: mask {entry['pixel_mask'][0, 0, 0, 0].tolist()}"
