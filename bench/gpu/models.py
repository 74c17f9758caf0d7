"""The models of the GPU check, all built with ComfyUI's own classes and loaders; nothing is downloaded.

* tiny models: the test suite's (tests/ltx_tdp_devkit/tiny_models.py), saved as safetensors and loaded by
  ComfyUI's `load_diffusion_model` / `comfy.sd.VAE` in the dtype and on the device asked for;
* the real-size LTX-2 transformer: ComfyUI detects it from the model's own state dict built on the meta
  device (no memory), then builds it directly on the target device in the target dtype and its weights
  get seeded random values in place (no full-size CPU copy ever exists);
* the real-size LTX-2 VAE: its state dict is made on the target device and handed to `comfy.sd.VAE`,
  which detects and builds it as it does for a checkpoint.

Model calls go through `BaseModel.apply_model` with the patcher's wrappers, as ComfyUI's samplers call it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runtime import device
from sizes import Layout


@dataclass
class CallInputs:
    """One model call's inputs, on the model's device: x (video, or packed video + audio for LTX-2)."""

    x: torch.Tensor
    context: torch.Tensor
    kwargs: dict[str, Any]
    video_shape: tuple[int, ...]

    def video(self, out: torch.Tensor) -> torch.Tensor:
        """The video part of a model output for these inputs."""
        shapes = self.kwargs.get("latent_shapes")
        if shapes is None:
            return out
        import comfy.utils

        return comfy.utils.unpack_latents(out, shapes)[0]

    def to(self, dev: torch.device) -> "CallInputs":
        move = lambda v: v.to(dev) if isinstance(v, torch.Tensor) else v  # noqa: E731
        return CallInputs(self.x.to(dev), self.context.to(dev), {k: move(v) for k, v in self.kwargs.items()},
                          self.video_shape)


def is_av(patcher: Any) -> bool:
    return hasattr(patcher.model.diffusion_model, "audio_in_channels")


def caption_width(dm: Any) -> int:
    """Width of the model's raw text features (LTX-Video 0.3.x models do not keep `caption_channels`)."""
    return getattr(dm, "caption_channels", None) or dm.caption_projection.linear_1.in_features


def context_width(dm: Any) -> int:
    """Width of the processed text context an LTX-2 (LTXAV) call takes: the video and audio halves, each
    caption_channels wide (LTX-2), or video + audio model widths where the caption projection runs before
    the text connectors (`caption_proj_before_connector`: LTX-2.3, LTX-2.5)."""
    if getattr(dm, "caption_proj_before_connector", False):
        return dm.inner_dim + dm.audio_inner_dim
    return 2 * caption_width(dm)


def call_inputs(patcher: Any, latent: tuple[int, int, int], audio_latents: int, tokens: int, seed: int,
                dev: torch.device | None = None) -> CallInputs:
    """Seeded inputs for one call of `patcher`'s model on a (frames, height, width) video latent.

    LTX-2 gets ComfyUI's packed (video, audio) latent with `latent_shapes` and its processed text context
    (video and audio halves, `context_width`); LTX-Video gets the video and caption_channels.
    """
    from ltx_tdp_devkit.ltx_helpers import randn

    dm = patcher.model.diffusion_model
    dev = dev or device()
    video = randn(1, 128, *latent, seed=seed)
    kwargs: dict[str, Any] = {"attention_mask": torch.ones(1, tokens, dtype=torch.long, device=dev), "frame_rate": 25.0}
    caption_channels = caption_width(dm)
    if is_av(patcher):
        import comfy.utils

        audio = randn(1, 8, audio_latents, 16, seed=seed + 1)
        x, shapes = comfy.utils.pack_latents([video, audio])
        kwargs["latent_shapes"] = shapes
        width = context_width(dm)
    else:
        x, width = video, caption_channels
    context = randn(1, tokens, width, seed=seed + 2)
    return CallInputs(x.to(dev), context.to(dev), kwargs, tuple(video.shape))


def model_call(patcher: Any, inputs: CallInputs, sigma: float) -> torch.Tensor:
    """One `apply_model` call through ComfyUI's wrapper path (TDP's wrappers included when patched), with
    the patcher loaded the way a sampler loads it (its object patches applied). Returns the x0 output."""
    import comfy.model_management

    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    t = torch.full((inputs.x.shape[0],), sigma, device=inputs.x.device)
    with torch.inference_mode():
        return patcher.model.apply_model(inputs.x, t, c_crossattn=inputs.context,
                                         transformer_options={"wrappers": patcher.wrappers}, **inputs.kwargs)


def tdp(patcher: Any, layout: Layout | None, group: Any = None, audio_mode: str = "held") -> Any:
    """`patcher` patched by the pack's TDP patcher with `layout` (None: 1 x 1), its tiles shared by `group`,
    LTX-2 audio `held` or `average`d over the tile passes."""
    from ltx_tdp_devkit.ltx_helpers import patch, tiling

    tiles = tiling(height=(layout.height, layout.overlap), width=(layout.width, layout.overlap)) if layout else tiling()
    return patch(patcher, tiles, group=group, audio_mode=audio_mode)


# --- tiny models (the test suite's) ----------------------------------------------------------------------


def tiny_transformer_file(base_dir: Path) -> Path:
    """The tiny LTX-2 transformer of the tests (LTX-Video where ComfyUI has no LTX-2), built once."""
    from ltx_tdp_devkit import tiny_models

    if tiny_models.has_ltxav():
        path = base_dir / "tiny_ltxav.safetensors"
        return path if path.exists() else tiny_models.build_ltxav(path)
    path = base_dir / "tiny_ltxv.safetensors"
    return path if path.exists() else tiny_models.build_ltxv(path)


def load_tiny_transformer(base_dir: Path, dtype: torch.dtype, dev: torch.device | None = None) -> Any:
    """The tiny transformer through ComfyUI's own loader, weights in `dtype`, kept on `dev`."""
    import comfy.sd

    dev = dev or device()
    options = {"dtype": dtype, "load_device": dev, "offload_device": dev}
    return comfy.sd.load_diffusion_model(str(tiny_transformer_file(base_dir)), model_options=options)


def load_tiny_vae(base_dir: Path) -> Any:
    """The tiny LTX VAE of the tests through `comfy.sd.VAE` (config from the file's metadata)."""
    import comfy.sd
    import comfy.utils
    from ltx_tdp_devkit import tiny_models

    path = base_dir / "tiny_vae.safetensors"
    if not path.exists():
        tiny_models.build_vae(path)
    sd, meta = comfy.utils.load_torch_file(str(path), return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=meta)


# --- real-size models --------------------------------------------------------------------------------------


@torch.no_grad()
def fill_random_(named: dict[str, torch.Tensor], seed: int) -> None:
    """Seeded values in place, generated on the tensors' device: weights ~ N(0, 1/fan_in), biases 0, other
    1-D tensors (norm scales) 1; LTX VAE statistics: std-of-means 1, mean-of-means 0 (latent kept as is)."""
    gens: dict[torch.device, torch.Generator] = {}
    for name, t in named.items():
        if not t.is_floating_point():
            continue
        if name.endswith("std-of-means"):
            t.fill_(1.0)
        elif name.endswith("mean-of-means") or name.endswith("bias"):
            t.zero_()
        elif t.ndim >= 2:
            gen = gens.setdefault(t.device, torch.Generator(device=t.device).manual_seed(seed))
            t.normal_(0.0, 1.0 / math.sqrt(max(math.prod(t.shape[1:]), 1)), generator=gen)
        else:
            t.fill_(1.0)


def build_ltx2_transformer(overrides: dict, dtype: torch.dtype, seed: int = 0) -> tuple[Any, dict]:
    """LTX-2 (ComfyUI's LTXAVModel) at `overrides` on top of its defaults, detected by ComfyUI from its
    own state dict and built directly on the device in `dtype`, inside a ModelPatcher that keeps it there.

    Returns (patcher, facts): facts holds the detected config, parameter count and weight bytes.
    """
    import comfy.model_detection
    import comfy.model_patcher
    import comfy.ops
    from comfy.ldm.lightricks.av_model import LTXAVModel

    dev = device()
    with torch.device("meta"):
        meta = LTXAVModel(**overrides, operations=comfy.ops.disable_weight_init, device=torch.device("meta"))
    sd = meta.state_dict()
    n_params = sum(t.numel() for t in sd.values())
    metadata = {"config": json.dumps({"transformer": overrides})} if overrides else None
    model_config = comfy.model_detection.model_config_from_unet(sd, "", metadata=metadata)
    del meta, sd
    if model_config is None or type(model_config).__name__ != "LTXAV":
        raise RuntimeError(f"ComfyUI did not detect this state dict as LTX-2 (LTXAV): {model_config!r}")
    detected = {k: v for k, v in model_config.unet_config.items() if k != "dtype"}
    model_config.set_inference_dtype(dtype, None)
    with torch.device(dev):
        model = model_config.get_model({}, "", device=dev)
    fill_random_(dict(model.diffusion_model.named_parameters()), seed)
    patcher = comfy.model_patcher.ModelPatcher(model, load_device=dev, offload_device=dev)
    dm = model.diffusion_model
    facts = {
        "detected_config": detected,
        "parameters": n_params,
        "weights_gib": sum(p.numel() * p.element_size() for p in dm.parameters()) / 2**30,
        "layers": len(dm.transformer_blocks),
        "video_width": dm.inner_dim,
        "audio_width": dm.audio_inner_dim,
        "caption_channels": caption_width(dm),
        "dtype": str(dtype).replace("torch.", ""),
    }
    return patcher, facts


def build_vae(config: dict, seed: int = 0) -> Any:
    """A `comfy.sd.VAE` for the LTX VAE `config` with seeded random decoder weights (made on the device).

    Only the decoder's tensors are given: ComfyUI builds the encoder too and leaves it unset; it is never run.
    """
    import comfy.sd
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    with torch.device("meta"):
        meta = VideoVAE(config=config)
    sd = {k: torch.empty(v.shape, dtype=v.dtype, device=device()) for k, v in meta.state_dict().items()
          if not k.startswith("encoder.")}
    del meta
    fill_random_(sd, seed)
    return comfy.sd.VAE(sd=sd, metadata={"config": json.dumps({"vae": config})})
