"""Quantized Linear weights in ComfyUI's stored format, made by ComfyUI's own quantizers (comfy.quant_ops and
comfy-kitchen's layouts), so ComfyUI's loaders read them back exactly as they read a quantized checkpoint.

ComfyUI 0.24+ stores a quantized Linear `X` as `X.weight` (the codes), its scale(s) (`X.weight_scale`, for
nvfp4 also `X.weight_scale_2`) and `X.comfy_quant`: the bytes of a JSON object naming the format (and, for
int8-convrot, the rotation), which the loader reads on the CPU. It computes with a `QuantizedTensor` weight.
"""

from __future__ import annotations

import json

import torch

FORMATS = {
    "float8_e4m3fn": ("float8_e4m3fn", {}),
    "int8_convrot": ("int8_tensorwise", {"per_channel": True, "convrot": True}),
    "nvfp4": ("nvfp4", {}),
    "mxfp8": ("mxfp8", {}),
}
"""Our name -> (ComfyUI's format name in `comfy_quant`, the layout's quantize options). int8-convrot is ComfyUI's
int8_tensorwise with per-output-channel scales and a group-wise Hadamard rotation of the input features."""


def quantized_entries(layer_name: str, weight: torch.Tensor, fmt: str, convrot_group: int = 256) -> dict[str, torch.Tensor]:
    """The stored entries of Linear `layer_name` whose `weight` (out x in) is quantized in `fmt` (a FORMATS key;
    `convrot_group` input features per rotation for int8_convrot: it must divide in_features).

    Loading them gives the QuantizedTensor ComfyUI makes from `weight`; the codes and scales stay on `weight`'s
    device, `comfy_quant` is a CPU uint8 tensor. Raises ValueError for a format this ComfyUI cannot store.
    """
    import comfy.quant_ops as quant

    if fmt not in FORMATS:
        raise ValueError(f"unknown quantized format {fmt!r}; the formats are {', '.join(FORMATS)}")
    algo, options = FORMATS[fmt]
    algos = getattr(quant, "QUANT_ALGOS", {})
    if algo not in algos:
        raise ValueError(f"this ComfyUI cannot load {fmt} weights (comfy.quant_ops has no {algo!r} format)")
    conf: dict = {"format": algo}
    if fmt == "int8_convrot":
        if weight.shape[-1] % convrot_group:
            raise ValueError(f"{layer_name}: {weight.shape[-1]} input features do not split into rotation groups "
                             f"of {convrot_group}")
        options = {**options, "convrot_groupsize": convrot_group}
        conf.update(convrot=True, convrot_groupsize=convrot_group)
    qt = quant.QuantizedTensor.from_float(weight, algos[algo]["comfy_tensor_layout"], **options)
    out = {k: v.contiguous() for k, v in qt.state_dict(f"{layer_name}.weight").items()}
    out[f"{layer_name}.comfy_quant"] = torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8,
                                                    device="cpu")
    return out
