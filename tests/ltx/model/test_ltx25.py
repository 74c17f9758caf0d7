"""LTX-2.5's transformer (ComfyUI 0.32+) through the tiles, with a tiny LTX-2.5 model (keyframe marker on) loaded by
UNETLoader: the marker lands on exactly the tokens it marks untiled, `generated_keyframes` is rewritten per tile,
1 x 1 tiling is bit-identical, and STG / modality guidance flags reach every tile call.

The marker masks are read at the model's own `keyframes_abs_pos_mask` through an object patch on the clone (the
public hook TDP itself uses); the expected masks come from the unpatched model's untiled call, cropped by hand.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import conditioning, ksample, patch, randn, tiling

pytestmark = [pytest.mark.ltx2, pytest.mark.ltx25]

MASK_KEY = "diffusion_model.keyframes_abs_pos_mask"
F, H, W = 6, 4, 4
GUIDE_STARTS = (0, 17)
"""Two guide frames appended after the video, at pixel times [0, 1) (latent frame 0) and [17, 25) (frame 3)."""
GENERATED = {"tokens_per_frame": H * W, "first_latent_frame": 3, "num_keyframes": 2}
CONTEXT_DIM = 32


class MaskRecorder:
    """Wraps whatever `keyframes_abs_pos_mask` a clone has (TDP's patch or the model's own) and records each call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __call__(self, pixel_coords, orig_shape, grid_mask, num_guide_tokens, generated_keyframes):
        mask = self.inner(pixel_coords, orig_shape, grid_mask, num_guide_tokens, generated_keyframes)
        self.calls.append({"mask": mask.clone(), "shape": list(orig_shape), "guides": num_guide_tokens,
                           "generated": generated_keyframes})
        return mask


def _record(model_patcher) -> MaskRecorder:
    m = model_patcher
    dm = m.model.diffusion_model
    inner = m.object_patches.get(MASK_KEY) or type(dm).keyframes_abs_pos_mask.__get__(dm, type(dm))
    recorder = MaskRecorder(inner)
    m.add_object_patch(MASK_KEY, recorder)
    return recorder


def _guides() -> torch.Tensor:
    """keyframe_idxs (1, 3, tokens, 2) of the guide frames: pixel [start, end) on every axis."""
    hh, ww = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    frames = []
    for start in GUIDE_STARTS:
        end = start + 1 if start == 0 else start + 8
        t = torch.tensor([[start, end]]).expand(H * W, 2)
        y = torch.stack([hh.flatten() * 32, hh.flatten() * 32 + 32], -1)
        x = torch.stack([ww.flatten() * 32, ww.flatten() * 32 + 32], -1)
        frames.append(torch.stack([t, y, x]))
    return torch.cat(frames, dim=1)[None].to(torch.float32)


def _call(model_patcher, generated: dict | None = GENERATED, guides: bool = True, **opts) -> torch.Tensor:
    """One apply_model call of an LTX-2.5 AV latent (video + guide frames, audio) through the wrapper path."""
    import comfy.model_management
    import comfy.utils

    comfy.model_management.load_models_gpu([model_patcher])
    g = len(GUIDE_STARTS) if guides else 0
    video, audio = randn(1, 128, F + g, H, W, seed=1), randn(1, 8, 5, 16, seed=2)
    x, shapes = comfy.utils.pack_latents([video, audio])
    conds = {"latent_shapes": shapes, "attention_mask": torch.ones(1, 8, dtype=torch.long), "frame_rate": 25.0,
             "denoise_mask": torch.cat([torch.ones(1, 1, F, H, W), torch.zeros(1, 1, g, H, W)], dim=2)}
    if guides:
        conds["keyframe_idxs"] = _guides()
    if generated is not None:
        conds["generated_keyframes"] = dict(generated)
    ctx = randn(1, 8, CONTEXT_DIM, seed=11)
    options = {"wrappers": model_patcher.wrappers, **opts}
    with torch.inference_mode():
        return model_patcher.model.apply_model(x, torch.full((1,), 0.5), c_crossattn=ctx,
                                               transformer_options=options, **conds)


def _untiled_mask(ltx25, **kw) -> torch.Tensor:
    reference = ltx25.clone()
    recorder = _record(reference)
    _call(reference, **kw)
    assert len(recorder.calls) == 1
    return recorder.calls[0]["mask"][0]


LAYOUTS = {
    "temporal 3": dict(frames=(3, 1)),
    "spatial 2x2": dict(height=(2, 1), width=(2, 1)),
    "temporal 2 x width 2": dict(frames=(2, 1), width=(2, 1)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("generated", [None, GENERATED], ids=["no-generated", "generated-keyframes"])
def test_marker_mask_of_every_tile_equals_the_untiled_mask_cropped(comfy, ltx25, layout, generated):
    from ltx_tdp.tiling import VIDEO_AXES, plan_tiles

    untiled = _untiled_mask(ltx25, generated=generated)
    grid = untiled.reshape(F + len(GUIDE_STARTS), H, W)
    assert grid[0].all() and not grid[F:].any(), "untiled: frame 0 marked, guide frames never"
    assert grid[3:5].all() == (generated is not None), "untiled: the generated keyframes' frames marked"

    tiles = tiling(**LAYOUTS[layout])
    model = patch(ltx25, tiles, audio_mode="average")
    recorder = _record(model)
    _call(model, generated=generated)
    plan = plan_tiles((F, H, W), tiles.axes, VIDEO_AXES)
    assert len(recorder.calls) == len(plan.tiles), f"{len(recorder.calls)} marker calls for {len(plan.tiles)} tiles"
    for tile, call in zip(plan.tiles, recorder.calls):
        fs, hs, ws = tile.slices
        expected = torch.cat([grid[fs, hs, ws].flatten(), torch.zeros(call["guides"], dtype=torch.bool)])
        got = call["mask"][0]
        assert torch.equal(got, expected), (f"tile {tile.index} at {tile.origin}: marks {got.nonzero().flatten()}"
                                            f" where the untiled call marks {expected.nonzero().flatten()}")
        tile_f, tile_h, tile_w = tile.shape
        if generated is not None:
            first, stop = max(3, fs.start), min(5, fs.stop)
            want = {"tokens_per_frame": tile_h * tile_w, "first_latent_frame": first - fs.start if stop > first else 0,
                    "num_keyframes": max(0, stop - first)}
            if tile.shape == (F, H, W):
                want = GENERATED
            assert call["generated"] == want, f"tile {tile.index}: generated_keyframes {call['generated']} != {want}"


def test_a_temporal_tile_mid_clip_would_mark_its_first_frame_without_the_crop(comfy, ltx25):
    """The reason for the patch: the model's own rule on a normalised mid-clip tile marks the tile's first frame."""
    model = patch(ltx25, tiling(frames=(3, 1)), audio_mode="average")
    model.object_patches.pop(MASK_KEY)  # the model's own mask, on TDP's positions
    recorder = _record(model)
    _call(model, generated=None)
    later = recorder.calls[1]["mask"][0].reshape(-1, H, W)
    assert later[0].all(), "expected the model's own rule to mark a mid-clip tile's first frame (positions from 0)"


@pytest.mark.parametrize("guides", [False, True], ids=["plain", "guides-and-generated-keyframes"])
def test_one_by_one_tiling_is_bit_identical_to_the_unpatched_ltx25(comfy, ltx25, guides):
    generated = GENERATED if guides else None
    reference = _call(ltx25, generated=generated, guides=guides)
    tiled = _call(patch(ltx25, tiling(), audio_mode="average"), generated=generated, guides=guides)
    assert torch.equal(tiled, reference), f"max abs diff {(tiled - reference).abs().max():.3e}"


def test_one_by_one_ksampler_is_bit_identical_in_average_mode(comfy, ltx25):
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 3, 4, 4, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    kw = dict(steps=2, denoise=0.5, positive=conditioning(1, dim=CONTEXT_DIM), negative=conditioning(2, dim=CONTEXT_DIM))
    reference = ksample(comfy, ltx25, latent, **kw)
    tiled = ksample(comfy, patch(ltx25, tiling(), audio_mode="average"), latent, **kw)
    for name, a, b in zip(("video", "audio"), tiled.unbind(), reference.unbind()):
        assert torch.equal(a, b), f"{name}: max abs diff {(a - b).abs().max():.3e}"


def test_a_spatial_tile_no_longer_hits_the_models_tokens_per_frame_error(comfy, ltx25):
    out = _call(patch(ltx25, tiling(height=(2, 1), width=(2, 1)), audio_mode="average"))
    assert torch.isfinite(out).all()


def test_generated_keyframes_of_another_resolution_fail_as_they_do_untiled(comfy, ltx25):
    stale = {**GENERATED, "tokens_per_frame": 4}
    with pytest.raises(ValueError) as untiled:
        _call(ltx25, generated=stale)
    with pytest.raises(ValueError) as tiled:
        _call(patch(ltx25, tiling(width=(2, 1)), audio_mode="average"), generated=stale)
    assert str(tiled.value) == str(untiled.value)
    assert "Separate the generated keyframes" in str(tiled.value)


GUIDANCE = {
    "stg": ("LTXVSpatioTemporalGuidance", dict(scale=1.0, blocks="0", start_percent=0.0, end_percent=1.0),
            "stg_self_attn_blocks", frozenset({0})),
    "modality": ("LTXVModalityGuidance", dict(modality_scale=3.0, start_percent=0.0, end_percent=1.0),
                 "a2v_cross_attn", False),
}


def _with_guidance(comfy, model, kind: str):
    node, inputs, _, _ = GUIDANCE[kind]
    (guided,) = comfy.run_node(node, model=model, **inputs)
    return guided


def _flag_probe(model_patcher, key: str, seen: list) -> None:
    """A DIFFUSION_MODEL wrapper (inside every tile call) that records the tile's transformer option `key`."""
    import comfy.patcher_extension as ext

    def wrapper(executor, *args, **kwargs):
        options = args[5] if len(args) > 5 else kwargs.get("transformer_options", {})
        x = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]  # LTXAV: [video, audio]
        seen.append((tuple(x.shape), options.get(key, "absent")))
        return executor(*args, **kwargs)

    model_patcher.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "test_probe", wrapper)


@pytest.mark.parametrize("kind", list(GUIDANCE))
def test_guidance_flags_reach_every_tile_call(comfy, ltx25, kind):
    _, _, key, value = GUIDANCE[kind]
    model = patch(_with_guidance(comfy, ltx25, kind), tiling(height=(2, 1), width=(2, 1)))
    seen: list = []
    _flag_probe(model, key, seen)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 2, 4, 4, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    ksample(comfy, model, latent, steps=2, denoise=0.5, positive=conditioning(1, dim=CONTEXT_DIM),
            negative=conditioning(2, dim=CONTEXT_DIM))
    flagged = [s for s in seen if s[1] == value]
    # Per step: 4 tiles of the guided pass and 4 of the perturbed pass; the perturbed ones carry the flag.
    assert len(seen) == 2 * 2 * 4 and len(flagged) == 2 * 4, seen
    whole = 128 * 2 * 4 * 4 + 8 * 5 * 16  # the packed (video, audio) latent of the whole call
    assert all(s[0][-1] < whole for s in flagged), f"a flagged call ran on the whole latent, not a tile: {flagged}"

