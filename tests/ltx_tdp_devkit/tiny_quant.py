"""Tiny quantized LTX transformers, stored the way ComfyUI stores quantized checkpoints.

ComfyUI (0.24+) stores a quantized Linear `X` as `X.weight` (the codes: fp8, int8, packed fp4),
`X.weight_scale` (and for nvfp4 `X.weight_scale_2`) and `X.comfy_quant`: the JSON bytes of
`{"format": <a key of comfy.quant_ops.QUANT_ALGOS>, ...}`. int8-convrot (LTX-2.5's templates) is format
`int8_tensorwise` with `"convrot": true` and `"convrot_groupsize": G`: the weight is rotated by a
block-diagonal Hadamard matrix of size G (a power of 4) and quantized per output row. The codes and scales
are made by comfy-kitchen's own quantizers (`QuantizedTensor.from_float`); UNETLoader detects the format
from `comfy_quant` and computes with a `QuantizedTensor` parameter.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

FORMATS = {
    "float8_e4m3fn": ("TensorCoreFP8E4M3Layout", {"scale": "recalculate"}),
    "int8_convrot": ("TensorWiseINT8Layout", {"is_weight": True, "per_channel": True, "convrot": True}),
    "mxfp8": ("TensorCoreMXFP8Layout", {}),
    "nvfp4": ("TensorCoreNVFP4Layout", {"scale": "recalculate"}),
}
"""Test names of the formats -> (comfy-kitchen layout, quantizer arguments)."""

CONVROT_GROUP = 16
"""Hadamard group of the tiny int8-convrot layers (a power of 4 dividing the tiny widths)."""

QUANTIZED_PREFIX = "transformer_blocks."
"""The Linear layers quantized, as in the published LTX checkpoints: those of the transformer blocks."""


def available_formats() -> tuple[str, ...]:
    """The formats of FORMATS this ComfyUI loads (its comfy.quant_ops knows the format and the layout)."""
    try:
        import comfy.quant_ops as q
    except ImportError:  # ComfyUI before quantized checkpoints (0.3.x)
        return ()
    known, layout_class = getattr(q, "QUANT_ALGOS", {}), getattr(q, "get_layout_class", None)
    out = []
    for name, (layout, _) in FORMATS.items():
        stored = "int8_tensorwise" if name == "int8_convrot" else name
        if stored in known and layout_class is not None and layout_class(layout) is not None:
            out.append(name)
    return tuple(out)


def comfy_quant(fmt: str, convrot_group: int = CONVROT_GROUP) -> dict:
    """The `comfy_quant` JSON of a layer in format `fmt` (a key of FORMATS)."""
    if fmt == "int8_convrot":
        return {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": convrot_group}
    return {"format": fmt}


def quantized_entries(layer_name: str, weight: torch.Tensor, fmt: str,
                      convrot_group: int = CONVROT_GROUP) -> dict[str, torch.Tensor]:
    """The state-dict entries of Linear `layer_name` with `weight` quantized in format `fmt`, as ComfyUI
    stores them (`.weight`, its scales, `.comfy_quant`); the bias is not included."""
    from comfy.quant_ops import QuantizedTensor

    layout, kwargs = FORMATS[fmt]
    kwargs = dict(kwargs, convrot_groupsize=convrot_group) if fmt == "int8_convrot" else dict(kwargs)
    qt = QuantizedTensor.from_float(weight.detach().to(torch.float32), layout, **kwargs)
    entries = {k: v.contiguous() for k, v in qt.state_dict(f"{layer_name}.weight").items()}
    data = json.dumps(comfy_quant(fmt, convrot_group)).encode("utf-8")
    entries[f"{layer_name}.comfy_quant"] = torch.tensor(list(data), dtype=torch.uint8)
    return entries


def quantize_state_dict(sd: dict[str, torch.Tensor], fmt: str, prefix: str = QUANTIZED_PREFIX,
                        convrot_group: int = CONVROT_GROUP) -> dict[str, torch.Tensor]:
    """`sd` with every 2-D `.weight` under `prefix` replaced by its quantized entries in format `fmt`."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in sd.items():
        if key.startswith(prefix) and key.endswith(".weight") and tensor.ndim == 2:
            out.update(quantized_entries(key[: -len(".weight")], tensor, fmt, convrot_group))
        else:
            out[key] = tensor
    return out


def build_quantized_ltxav(path: Path, fmt: str, seed: int = 0, **overrides) -> Path:
    """Save a tiny LTX-2 transformer (ComfyUI's LTXAVModel, tiny_models.LTXAV_CONFIG + `overrides`) with the
    Linear weights of its transformer blocks in format `fmt`; UNETLoader loads it as a quantized model."""
    from comfy.ldm.lightricks.av_model import LTXAVModel

    from .tiny_models import LTXAV_CONFIG

    return _build(LTXAVModel, {**LTXAV_CONFIG, **overrides}, path, fmt, seed)


def build_quantized_ltxv(path: Path, fmt: str, seed: int = 0, **overrides) -> Path:
    """The video-only LTX transformer (ComfyUI's LTXVModel, tiny_models.LTXV_CONFIG + `overrides`), quantized
    like `build_quantized_ltxav`."""
    from comfy.ldm.lightricks.model import LTXVModel

    from .tiny_models import LTXV_CONFIG

    return _build(LTXVModel, {**LTXV_CONFIG, **overrides}, path, fmt, seed)


def _build(cls: type, config: dict, path: Path, fmt: str, seed: int) -> Path:
    import comfy.ops

    from .tiny_models import save_with_config, seeded_state_dict

    model = cls(**config, operations=comfy.ops.disable_weight_init)
    sd = quantize_state_dict(seeded_state_dict(model, seed), fmt)
    return save_with_config(sd, path, {"transformer": config})


def quantized_layers(module: torch.nn.Module) -> dict[str, str]:
    """name -> comfy-kitchen layout of every submodule whose weight is a QuantizedTensor."""
    from comfy.quant_ops import QuantizedTensor

    return {name: m.weight._layout_cls for name, m in module.named_modules()
            if isinstance(getattr(m, "weight", None), QuantizedTensor)}


class LayoutRecorder:
    """`with LayoutRecorder(module) as seen:` records, for each Linear of `module` that runs its forward
    inside the block, what its weight is at that moment: the comfy-kitchen layout of a QuantizedTensor, or
    "plain". (int8 layers that ComfyUI runs through `linear_input_act` bypass the forward and are not seen.)"""

    def __init__(self, module: torch.nn.Module):
        self.module, self.seen, self.hooks = module, {}, []

    def __enter__(self) -> dict[str, str]:
        for name, m in self.module.named_modules():
            if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Linear":  # ComfyUI's ops Linears too
                self.hooks.append(m.register_forward_pre_hook(self._hook(name)))
        return self.seen

    def _hook(self, name: str):
        def record(mod: torch.nn.Module, _inputs: object) -> None:
            self.seen[name] = getattr(mod.weight, "_layout_cls", None) or "plain"
        return record

    def __exit__(self, *exc: object) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
