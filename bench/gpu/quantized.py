"""A quantized LTX transformer at any size, in the file format ComfyUI 0.24+ loads, without a file or a full
bf16 copy: the GPU check's LTX-2.5 transformer (fp8 e4m3fn, int8-convrot).

The model is built on the meta device (no memory) to learn its tensors. Each tensor is then made on the
device with seeded random values, one at a time; every Linear weight of the transformer blocks is
quantized at once into ComfyUI's stored entries (`X.weight` codes, `X.weight_scale`, `X.comfy_quant`: the
test kit's `ltx_tdp_devkit.tiny_quant`, the one quantizer of the suite, which picks the layers the same
way) and its bf16 values dropped. The
state dict and the config metadata go to ComfyUI's own `comfy.sd.load_diffusion_model_state_dict` (what
UNETLoader calls), which detects the model and loads the quantized layers as `QuantizedTensor` weights.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from runtime import device

FORMATS = {"fp8": "float8_e4m3fn", "int8": "int8_convrot"}
"""The GPU check's formats: its name -> the format name the test kit's quantizer takes."""


@torch.no_grad()
def _random(shape: torch.Size, name: str, gen: torch.Generator, dev: torch.device) -> torch.Tensor:
    """One tensor's seeded values on `dev` in bf16: weights ~ N(0, 1/fan_in), biases 0, 1-D scales 1."""
    t = torch.empty(shape, dtype=torch.bfloat16, device=dev)
    if name.endswith("bias"):
        return t.zero_()
    if t.ndim >= 2:
        return t.normal_(0.0, 1.0 / math.sqrt(max(math.prod(t.shape[1:]), 1)), generator=gen)
    return t.fill_(1.0)


def quantized_state_dict(model_class: type, config: dict, fmt: str, convrot_group: int, seed: int = 0,
                         dev: torch.device | None = None) -> tuple[dict[str, torch.Tensor], int, int]:
    """The state dict of `model_class(**config)` as a quantized checkpoint holds it, made on `dev`.

    Returns (state dict, parameter count, number of quantized layers). Only one bf16 weight exists at a time
    besides the (smaller) quantized entries; each layer's `comfy_quant` JSON stays on the CPU, where
    ComfyUI's loader reads it.
    """
    import comfy.ops
    from ltx_tdp_devkit.tiny_quant import QUANTIZED_PREFIX, quantized_entries

    dev = dev or device()
    with torch.device("meta"):
        meta = model_class(**config, operations=comfy.ops.disable_weight_init, device=torch.device("meta"))
    shapes = {k: v.shape for k, v in meta.state_dict().items()}
    del meta
    layers = {k[: -len(".weight")] for k, s in shapes.items()
              if k.startswith(QUANTIZED_PREFIX) and k.endswith(".weight") and len(s) == 2}
    gen = torch.Generator(device=dev).manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        value = _random(shape, name, gen, dev)
        layer = name[: -len(".weight")] if name.endswith(".weight") else None
        if layer in layers:
            for key, entry in quantized_entries(layer, value, FORMATS.get(fmt, fmt), convrot_group).items():
                sd[key] = entry.cpu() if key.endswith("comfy_quant") else entry.to(dev)
            del value
        else:
            sd[name] = value
    return sd, sum(math.prod(s) for s in shapes.values()), len(layers)


def load_quantized_ltxav(config: dict, fmt: str, convrot_group: int, seed: int = 0) -> tuple[Any, dict]:
    """ComfyUI's LTXAVModel at `config` (overrides on its defaults), quantized in `fmt` ("fp8" or "int8"),
    loaded by ComfyUI's `load_diffusion_model_state_dict` to stay on the device. Returns (patcher, facts):
    facts holds the detected config, parameter count, quantized layers and the layer formats ComfyUI built.
    """
    import comfy.sd
    from comfy.ldm.lightricks.av_model import LTXAVModel

    dev = device()
    sd, n_params, n_layers = quantized_state_dict(LTXAVModel, config, fmt, convrot_group, seed, dev)
    stored_gib = sum(t.numel() * t.element_size() for t in sd.values()) / 2**30
    metadata = {"config": json.dumps({"transformer": config})}
    patcher = comfy.sd.load_diffusion_model_state_dict(sd, model_options={"load_device": dev, "offload_device": dev},
                                                       metadata=metadata)
    del sd
    if patcher is None or type(patcher.model).__name__ != "LTXAV":
        raise RuntimeError(f"ComfyUI did not detect this state dict as LTX-2 (LTXAV): {patcher and patcher.model!r}")
    dm = patcher.model.diffusion_model
    formats: dict[str, int] = {}
    for m in dm.modules():
        if getattr(m, "quant_format", None):
            formats[m.quant_format] = formats.get(m.quant_format, 0) + 1
    unet = patcher.model.model_config.unet_config
    facts = {
        "format": FORMATS.get(fmt, fmt),
        "detected_config": {k: v for k, v in unet.items() if k != "dtype"},
        "parameters": n_params,
        "quantized_layers": n_layers,
        "loaded_layer_formats": formats,
        "stored_gib": stored_gib,
        "layers": len(dm.transformer_blocks),
        "video_width": dm.inner_dim,
        "audio_width": dm.audio_inner_dim,
        "keyframe_marker": getattr(dm, "keyframes_abs_pos_embedding", None) is not None,
        "compute_dtype": str(patcher.model.manual_cast_dtype or patcher.model.get_dtype()).replace("torch.", ""),
        "convrot_group": convrot_group if fmt == "int8" else None,
    }
    return patcher, facts
