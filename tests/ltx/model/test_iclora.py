"""IC-LoRA guides through the tiles (ComfyUI 0.33's guide path), on the tiny LTX-2 and LTX-2.5 transformers.

The guides are built as users build them, by ComfyUI's own `LTXVAddGuide`: an IC-LoRA control video with the
`iclora_parameters` `GetICLoRAParameters` reads from a factor-2 IC-LoRA (`{"reference_downscale_factor": 2}`,
what the official `video_ltx2_3_ic_lora` template's union-control ref0.5 LoRA gives), with a pixel attention mask
and strength 0.8, and a plain keyframe image (factor 1) on the last frame. The control video is encoded at half
size and dilated onto the full latent grid: its real tokens sit at every 2nd row and column, the rest have a
negative denoise mask and ComfyUI's model drops them.

"The model on the crop" of a tile, the reference of the one-tile-region tests, is the unpatched model called on
the tile's crop of every per-token input, written here from the untiled inputs with ComfyUI's own functions:
the latent and its denoise mask cropped to the tile's frames, rows and columns plus the guide frames it keeps
(the guide frames overlapping it in time) under the same rows and columns; `keyframe_idxs` of those guide tokens,
shifted by the tile's origin in pixels (the crop's video positions start at zero); and per guide one attention
entry for the tokens kept: `pre_filter_count` the kept tokens, `latent_shape` the grid of real tokens under the
tile (kept frames, rows r with r % 2 == 0, columns likewise for the dilated guide), `pixel_mask` their weights,
taken from the model's own `_downsample_mask_to_latent` of the untiled entry. The temporal tile used starts at
frame 0, so its video positions are the crop's own.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.ltx_helpers import add_iclora_guides, conditioning, ksample, patch, randn, tiling

pytestmark = pytest.mark.ltx2

CONTEXT_DIM = 32
FACTOR = 2
F, H, W = 3, 8, 12
"""The video latent: 17 frames at 384 x 256 px."""
MODELS = [pytest.param("ltxav", id="ltx2"), pytest.param("ltx25", id="ltx25", marks=pytest.mark.ltx25)]


@pytest.fixture(scope="module")
def guided(comfy, vae, ltxav):
    """(positive, negative, latent) with an IC-LoRA control video (factor 2, mask, strength 0.8) at frame 0 and a
    keyframe image at the last frame, added by ComfyUI's LTXVAddGuide (ltx_helpers.add_iclora_guides). Needs an
    LTX-2 ComfyUI (`ltxav` skips elsewhere: older LTXVAddGuides have no IC-LoRA parameters)."""
    return add_iclora_guides(comfy, vae, {"samples": randn(1, 128, F, H, W, seed=3)},
                             conditioning(1, dim=CONTEXT_DIM), conditioning(2, dim=CONTEXT_DIM), FACTOR)


def _model(request, name: str):
    return request.getfixturevalue(name)


def _conds(guided) -> dict:
    pos, _, latent = guided
    cond = pos[0][1]
    return {"keyframe_idxs": cond["keyframe_idxs"], "guide_attention_entries": cond["guide_attention_entries"],
            "denoise_mask": latent["noise_mask"]}


def test_the_guides_are_what_ltxvaddguide_makes_for_a_factor_2_iclora(guided):
    _, _, latent = guided
    ic, key = _conds(guided)["guide_attention_entries"]
    assert latent["samples"].shape[2] == F + F + 1, "3 video frames, 3 control frames, 1 keyframe"
    assert ic["pre_filter_count"] == F * H * W and list(ic["latent_shape"]) == [F, H // 2, W // 2], ic
    assert key["pre_filter_count"] == H * W and list(key["latent_shape"]) == [1, H, W], key
    mask = latent["noise_mask"][0, 0, F:2 * F]
    real = torch.zeros(H, W, dtype=torch.bool)
    real[::2, ::2] = True
    assert bool((mask[:, real] >= 0).all()) and bool((mask[:, ~real] < 0).all()), \
        "the control frames' real tokens sit at every 2nd cell, the rest are dropped (negative mask)"


def _probe(model_patcher, record: list):
    """An APPLY_MODEL wrapper inside TDP's: records each tile call's inputs."""
    import comfy.patcher_extension as ext

    def wrapper(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kw):
        record.append({"x": x, **kw})
        return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kw)

    model_patcher.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_probe", wrapper)
    return model_patcher


def _sample(comfy, model, guided, audio: bool):
    pos, neg, latent = guided
    if audio:
        (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent=latent,
                                   audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    return ksample(comfy, model, latent, steps=2, cfg=2.0, denoise=0.5, positive=pos, negative=neg)


@pytest.mark.parametrize("name", MODELS)
def test_one_by_one_tiling_with_iclora_guides_is_bit_identical_to_the_unpatched_ksampler(comfy, request, guided, name):
    model = _model(request, name)
    reference = _sample(comfy, model, guided, audio=True)
    tiled = _sample(comfy, patch(model, tiling(), audio_mode="average"), guided, audio=True)
    for part, a, b in zip(("video", "audio"), tiled.unbind(), reference.unbind()):
        assert torch.equal(a, b), f"{name} {part}: max abs diff {(a - b).abs().max():.3e}"


GUIDE_TIMES = [(0, 1)] + [(8 * j - 7, 8 * j + 1) for j in range(1, F)] + [(16, 17)]
"""Pixel time [start, end) of each guide frame as LTXVAddGuide records it (causal first frame): the control video's
latent frames, then the keyframe at frame 16."""


def _tile_time(dm, frames: slice) -> tuple[int, int]:
    """Pixel time [start, end) of latent frames `frames` in the model's own position map (causal or not)."""
    if dm.causal_temporal_positioning:
        return (max(0, 8 * frames.start - 7), 8 * frames.stop - 7)
    return (8 * frames.start, 8 * frames.stop)


def kept_guides(dm, frames: slice) -> list[int]:
    """The guide frames (0 .. F-1 control frames, F the keyframe) whose time overlaps the tile's."""
    lo, hi = _tile_time(dm, frames)
    return [g for g, (start, end) in enumerate(GUIDE_TIMES) if start < hi and end > lo]


def _real(interval: slice) -> torch.Tensor:
    """The dilated guide's real rows (or columns) inside `interval`, as indices of its grid before dilation."""
    return torch.tensor([i // FACTOR for i in range(interval.start, interval.stop) if i % FACTOR == 0])


def crop_inputs(dm, x: torch.Tensor, conds: dict, frames: slice, hs: slice, ws: slice) -> tuple[torch.Tensor, dict]:
    """The model on the crop (module docstring): the crop's latent and conds, from the untiled ones. `dm` is the
    diffusion model: its position map decides the guide frames the tile keeps, its own `_downsample_mask_to_latent`
    gives the untiled guide token weights."""
    ic, key = conds["guide_attention_entries"]
    guide_frames = kept_guides(dm, frames)
    rows = list(range(frames.start, frames.stop)) + [F + g for g in guide_frames]
    crop = lambda t: t[:, :, rows][..., hs, ws]  # noqa: E731
    kf = conds["keyframe_idxs"]
    grid = kf.reshape(kf.shape[0], 3, F + 1, H, W, 2)[:, :, guide_frames][:, :, :, hs, ws]
    origin = torch.tensor([_tile_time(dm, slice(frames.start, frames.start + 1))[0], 32 * hs.start, 32 * ws.start])
    kf_crop = (grid - origin.view(1, 3, 1, 1, 1, 1).to(grid)).reshape(kf.shape[0], 3, -1, 2)
    th, tw = hs.stop - hs.start, ws.stop - ws.start
    ic_kept = [g for g in guide_frames if g < F]
    entries = []
    if ic_kept:
        weights = dm._downsample_mask_to_latent(ic["pixel_mask"], *ic["latent_shape"]).reshape(
            1, 1, *ic["latent_shape"])
        r, c = _real(hs), _real(ws)
        entries.append({**ic, "pre_filter_count": len(ic_kept) * th * tw,
                        "latent_shape": [len(ic_kept), len(r), len(c)],
                        "pixel_mask": weights[:, :, ic_kept][..., r, :][..., c]})
    if F in guide_frames:
        entries.append({**key, "pre_filter_count": th * tw, "latent_shape": [1, th, tw]})
    return crop(x), {"keyframe_idxs": kf_crop, "guide_attention_entries": entries,
                     "denoise_mask": crop(conds["denoise_mask"])}


def _call(model_patcher, video: torch.Tensor, conds: dict, audio: torch.Tensor | None = None) -> torch.Tensor:
    """One apply_model call through the real wrapper path; the video part of its x0."""
    import comfy.model_management
    import comfy.utils

    comfy.model_management.load_models_gpu([model_patcher])
    kw = {"attention_mask": torch.ones(1, 8, dtype=torch.long), "frame_rate": 25.0, **conds}
    x = video
    if audio is not None:
        x, shapes = comfy.utils.pack_latents([video, audio])
        kw["latent_shapes"] = shapes
    options = {"wrappers": model_patcher.wrappers}
    with torch.inference_mode():
        out = model_patcher.model.apply_model(x, torch.full((1,), 0.6), c_crossattn=randn(1, 8, CONTEXT_DIM, seed=11),
                                              transformer_options=options, **kw)
    return comfy.utils.unpack_latents(out, kw["latent_shapes"])[0] if audio is not None else out


REGIONS = {
    # layout, the tile (frames, rows, columns), its one-tile region (frames, rows, columns), the other time tiles
    "spatial 2x2, last tile (odd origin)": (dict(height=(2, 2), width=(2, 2)), (slice(0, F), slice(3, 8), slice(5, 12)),
                                            (slice(0, F), slice(5, 8), slice(7, 12)), []),
    "time 2 x space 2x2, first tile": (dict(frames=(2, 1), height=(2, 2), width=(2, 2)),
                                       (slice(0, 2), slice(0, 5), slice(0, 7)), (slice(0, 1), slice(0, 3), slice(0, 5)),
                                       [slice(1, 3)]),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("region", list(REGIONS))
def test_a_region_one_tile_covers_equals_the_model_on_that_tiles_crop(comfy, request, guided, name, region):
    layout, (fs, hs, ws), (rf, rh, rw), others = REGIONS[region]
    model = _model(request, name)
    dm = model.model.diffusion_model
    _, _, latent = guided
    x, conds, audio = latent["samples"], _conds(guided), randn(1, 8, 5, 16, seed=2)
    tiled = _call(patch(model, tiling(**layout), audio_mode="average"), x, conds, audio)
    alone = _call(model, *crop_inputs(dm, x, conds, fs, hs, ws), audio)
    local = lambda s, t: slice(s.start - t.start, s.stop - t.start)  # noqa: E731
    got, want = tiled[:, :, rf, rh, rw], alone[:, :, local(rf, fs), local(rh, hs), local(rw, ws)]
    assert torch.equal(got, want), f"{region}: video region differs from the crop by {(got - want).abs().max():.3e}"
    kept = kept_guides(dm, fs)
    alone_rows = {g: fs.stop - fs.start + i for i, g in enumerate(kept)}
    only_here = [g for g in kept if g < F and all(g not in kept_guides(dm, o) for o in others)]
    assert only_here, f"{region}: no control frame is kept by this time tile alone"
    got = tiled[:, :, [F + g for g in only_here], rh, rw]
    want = alone[:, :, [alone_rows[g] for g in only_here], local(rh, hs), local(rw, ws)]
    assert torch.equal(got, want), \
        f"{region}: control-frame region differs from the crop by {(got - want).abs().max():.3e}"


@pytest.mark.parametrize("name", MODELS)
def test_every_tile_keeps_the_real_guide_tokens_overlapping_it(comfy, request, guided, name):
    """Time 2 x height 2 x width 2 (frames [0,2) [1,3); rows [0,5) [3,8); columns [0,7) [5,12)): each tile keeps
    the guide frames overlapping it in the model's time positions, cropped to its rows and columns; its entries
    count its dilated tokens and describe the real ones under it."""
    model = _model(request, name)
    dm = model.model.diffusion_model
    calls: list = []
    tiled = _probe(patch(model, tiling(frames=(2, 1), height=(2, 2), width=(2, 2)), audio_mode="average"), calls)
    _sample(comfy, tiled, guided, audio=True)
    assert calls and len(calls) % 8 == 0, f"{len(calls)} tile calls, not whole 2 x 2 x 2 passes"
    frames, rows, cols = [slice(0, 2), slice(1, 3)], [slice(0, 5), slice(3, 8)], [slice(0, 7), slice(5, 12)]
    for index, call in enumerate(calls[:8]):
        fs, hs, ws = frames[index // 4], rows[index // 2 % 2], cols[index % 2]
        kept = kept_guides(dm, fs)
        control = [g for g in kept if g < F]
        shape = tuple(call["latent_shapes"][0])
        assert shape[2:] == (2 + len(kept), 5, 7), f"tile {index}: latent {shape}, guide frames {kept} expected"
        shift = _tile_time(dm, slice(fs.start, fs.start + 1))[0]
        times = call["keyframe_idxs"][0, 0, :, 0].reshape(len(kept), -1)
        want = torch.tensor([GUIDE_TIMES[g][0] - shift for g in kept], dtype=times.dtype)
        assert torch.equal(times, want[:, None].expand_as(times)), f"tile {index}: guide times {times[:, 0].tolist()}"
        space = call["keyframe_idxs"][0, 1:, :, 0].reshape(2, len(kept), 5, 7)
        assert space[0, :, :, 0].tolist() == [[32 * r for r in range(5)]] * len(kept), f"tile {index}: rows from 0"
        entries = call["guide_attention_entries"]
        r, c = _real(hs), _real(ws)
        assert entries[0]["pre_filter_count"] == len(control) * 35, entries[0]
        assert list(entries[0]["latent_shape"]) == [len(control), len(r), len(c)], entries[0]["latent_shape"]
        assert tuple(entries[0]["pixel_mask"].shape[2:]) == (len(control), len(r), len(c))
        survivors = int((call["denoise_mask"][0, 0, 2:2 + len(control)] >= 0).sum())
        assert survivors == len(control) * len(r) * len(c), f"tile {index}: {survivors} control tokens survive"
        assert len(entries) == 1 + (F in kept), [e["latent_shape"] for e in entries]


def test_an_attention_mask_without_a_weight_per_kept_token_is_refused(comfy, ltxav, guided):
    from ltx_tdp.tiling import TilingError

    pos, neg, latent = guided
    conds = _conds(guided)
    ic, key = conds["guide_attention_entries"]
    conds["guide_attention_entries"] = [{**ic, "latent_shape": [F, H, W]}, key]  # as if it were not dilated
    with pytest.raises(TilingError, match=r"guide 1's attention mask gives 288 token weights \(latent_shape "
                                          r"\[3, 8, 12\]\) for 72 guide tokens the model keeps"):
        _call(patch(ltxav, tiling(width=(2, 2)), audio_mode="average"), latent["samples"], conds,
              randn(1, 8, 5, 16, seed=2))


def test_guide_tokens_kept_in_no_grid_are_refused(comfy, ltxav, guided):
    """No ComfyUI node drops single real tokens of a guide; where something does, a tile's kept tokens are no grid
    and no latent_shape describes them."""
    from ltx_tdp.tiling import TilingError

    _, _, latent = guided
    conds = _conds(guided)
    mask = conds["denoise_mask"].clone()
    mask[:, :, F, 0, 0] = -1.0  # the control video's first real token
    conds["denoise_mask"] = mask
    with pytest.raises(TilingError, match=r"the tokens the model keeps of guide 1 do not form the same grid in every "
                                          r"frame of a tile"):
        _call(patch(ltxav, tiling(width=(2, 2)), audio_mode="average"), latent["samples"], conds,
              randn(1, 8, 5, 16, seed=2))
