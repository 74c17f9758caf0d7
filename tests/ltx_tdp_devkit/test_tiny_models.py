"""The tiny real models load through ComfyUI's own loaders and sample with its own KSampler."""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON


def test_tiny_ltxv_loads_through_unet_loader_as_ltxv(comfy, model_names):
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxv"], weight_dtype="default")
    import comfy.ldm.lightricks.model as ltx

    assert isinstance(model.model.diffusion_model, ltx.LTXVModel), type(model.model.diffusion_model)
    assert model.model.diffusion_model.inner_dim == 16


def test_tiny_vae_loads_from_metadata_with_ltx_scale_factors(comfy, model_names):
    (vae,) = _load_vae(comfy, model_names)
    latent = torch.randn(1, 128, 3, 2, 3)
    with torch.inference_mode():
        frames = vae.decode(latent)
    # One latent frame is 1 pixel frame (causal first frame), every other one 8; space is x32.
    assert tuple(frames.shape) == (1, 17, 64, 96, 3), tuple(frames.shape)


def _load_vae(comfy, model_names):
    import comfy.sd
    import comfy.utils
    import folder_paths

    sd, meta = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", model_names["vae"]),
                                           return_metadata=True)
    return (comfy.sd.VAE(sd=sd, metadata=meta),)


def test_one_ksampler_step_runs_on_the_tiny_ltxv(comfy, model_names):
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxv"], weight_dtype="default")
    cond = [[torch.randn(1, 8, 16), {"attention_mask": torch.ones(1, 8, dtype=torch.long), "frame_rate": 25.0}]]
    latent = {"samples": torch.zeros(1, 128, 2, 4, 4)}
    (out,) = comfy.run_node("KSampler", model=model, seed=1, steps=1, cfg=1.0, sampler_name="euler",
                            scheduler="simple", positive=cond, negative=cond, latent_image=latent, denoise=1.0)
    samples = out["samples"]
    assert samples.shape == latent["samples"].shape
    assert torch.isfinite(samples).all()
    assert samples.abs().max() > 0, "the sampler returned the empty latent unchanged"


@pytest.mark.ltx25
def test_tiny_ltx25_loads_through_unet_loader_with_the_ltx25_switches(comfy, ltx25):
    from comfy.ldm.lightricks.av_model import LTXAVModel
    from ltx_tdp_devkit.tiny_models import LTX25_SWITCHES

    dm = ltx25.model.diffusion_model
    assert isinstance(dm, LTXAVModel), type(dm)
    assert dm.keyframes_abs_pos_embedding is not None, "the keyframe marker was not detected from its key"
    assert dm.keyframes_abs_pos_embedding.abs().max() > 0, "the keyframe marker is all zeros: it would mark nothing"
    got = {name: getattr(dm, name) for name in LTX25_SWITCHES}
    assert got == LTX25_SWITCHES, f"switches as loaded {got} != {LTX25_SWITCHES}"
    block = dm.transformer_blocks[0]
    assert block.attn1.to_gate_logits is not None, "gated attention is off"
    assert block.ff.net[2].bias is None, "the feed-forward has a bias"


@pytest.mark.ltx25
def test_tiny_ltx25_state_dict_is_detected_by_comfy_sd_as_ltx25(comfy):
    import comfy.sd
    from ltx_tdp_devkit.tiny_models import has_ltx25, ltx25_state_dict

    if not has_ltx25():
        pytest.skip(LTX25_SKIP_REASON)
    sd, metadata = ltx25_state_dict(seed=3)
    marker = sd["keyframes_abs_pos_embedding"].clone()
    patcher = comfy.sd.load_diffusion_model_state_dict(sd, metadata=metadata)  # consumes sd
    dm = patcher.model.diffusion_model
    assert dm.use_keyframes_abs_pos_embedding and dm.causal_temporal_positioning
    loaded = dm.keyframes_abs_pos_embedding.detach()
    assert torch.equal(loaded, marker), "the marker's weights were not loaded"
    _, plain = ltx25_state_dict(seed=3, marker=False)
    no_marker = comfy.sd.load_diffusion_model_state_dict(ltx25_state_dict(seed=3, marker=False)[0], metadata=plain)
    assert no_marker.model.diffusion_model.keyframes_abs_pos_embedding is None, "marker detected without its key"


@pytest.mark.ltx25
def test_tiny_ltx25_samples_one_step_with_audio(comfy, ltx25):
    from ltx_tdp_devkit.ltx_helpers import conditioning, ksample, randn

    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": randn(1, 128, 2, 2, 3, seed=1)},
                               audio_latent={"samples": randn(1, 8, 5, 16, seed=2), "type": "audio"})
    # Text features as LTX-2's connectors hand them to the transformer: (video, audio) context, 16 + 16 wide.
    cond = dict(positive=conditioning(1, dim=32), negative=conditioning(2, dim=32))
    out = ksample(comfy, ltx25, latent, steps=1, denoise=0.5, **cond)
    for name, got, entered in zip(("video", "audio"), out.unbind(), latent["samples"].unbind()):  # NestedTensor
        assert got.shape == entered.shape, name
        assert torch.isfinite(got).all() and not torch.equal(got, entered), f"the sampler left the {name} unchanged"


def test_ltx25_is_expected_from_comfyui_032_on():
    from ltx_tdp_devkit.tiny_models import ltx25_expected

    cases = {"0.3.75": False, "0.24.0": False, "0.31.9": False, "0.32.0": True, "0.33.0": True, "1.0.0": True}
    got = {v: ltx25_expected(v) for v in cases}
    assert got == cases, got
