"""The tiny real models load through ComfyUI's own loaders and sample with its own KSampler."""

from __future__ import annotations

import torch


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
