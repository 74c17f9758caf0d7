"""Tiny real LTX-Video transformers as GGUF files (city96's ComfyUI-GGUF format), written with the `gguf` package.

The model is ComfyUI's own `LTXVModel` with seeded weights (`tiny_models.seeded_state_dict`), written the way
ComfyUI-GGUF's `tools/convert.py` writes a diffusion model: the model's own keys, `general.architecture`
"ltxv" (an architecture its loader accepts), 1-D tensors, tensors of at most QUANTIZATION_THRESHOLD values and
`scale_shift_table`s in F32, every other 2-D weight in the requested GGML type (Q8_0, Q4_0, ...) by
`gguf.quants.quantize`.

A GGUF file carries no ComfyUI config: ComfyUI-GGUF hands the state dict to `comfy.sd.load_diffusion_model_state_dict`
without metadata, so ComfyUI's model detection reads the config from the keys alone (LTXV: 32 heads, the head
width from `attn2.to_k`, the default caption width). GGUF_LTXV_CONFIG is therefore a config that detection
recovers exactly: 32 heads of width 2 (inner width 64) and the default 4096-wide captions. Text conditioning for
these models is `CAPTION_CHANNELS` wide.

LTX-2 (LTXAV) is not written: without metadata ComfyUI detects LTXAV with its full-size audio stream and text
connectors (the widths are not read from the keys), so a GGUF LTX-2 cannot be tiny.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .tiny_models import LTXV_CONFIG, seeded_state_dict

log = logging.getLogger(__name__)

ARCH = "ltxv"
"""`general.architecture` of the written files: ComfyUI-GGUF's loader.IMG_ARCH_LIST has it."""

CAPTION_CHANNELS = 4096
"""LTXVModel's default caption width, the one ComfyUI's detection assumes (it reads no caption width)."""

GGUF_LTXV_CONFIG = {
    **LTXV_CONFIG,
    "num_layers": 2,
    "num_attention_heads": 32,
    "attention_head_dim": 2,
    "cross_attention_dim": 64,
    "caption_channels": CAPTION_CHANNELS,
}
"""Two blocks, as ComfyUI's LTXV detection rebuilds it from the keys alone (heads x head width == 64 ==
cross_attention_dim)."""

QUANTIZATION_THRESHOLD = 1024
"""2-D tensors of at most this many values stay F32 (ComfyUI-GGUF's convert.py keeps very small tensors
unquantized too)."""

HIGH_PRECISION = ("scale_shift_table",)
"""Keys kept F32 whatever their size (convert.py's `keys_hiprec` for LTXV)."""

QTYPES = ("Q8_0", "Q4_0")
"""The quantized GGML types the tests write: 8 bits and 4 bits (both quantized by `gguf.quants` in Python)."""


def gguf_state_dict(seed: int = 0, **overrides) -> tuple[dict[str, torch.Tensor], dict]:
    """(float32 state dict of a seeded ComfyUI LTXVModel, its config): GGUF_LTXV_CONFIG with `overrides`."""
    import comfy.ldm.lightricks.model as ltx
    import comfy.ops

    config = {**GGUF_LTXV_CONFIG, **overrides}
    model = ltx.LTXVModel(**config, operations=comfy.ops.disable_weight_init)
    return seeded_state_dict(model, seed), config


def target_type(key: str, tensor: torch.Tensor, qtype: str):
    """The GGML type `key` is stored in: F32 for 1-D, small and high-precision tensors, else `qtype`."""
    import gguf

    if tensor.ndim <= 1 or tensor.numel() <= QUANTIZATION_THRESHOLD or any(k in key for k in HIGH_PRECISION):
        return gguf.GGMLQuantizationType.F32
    return gguf.GGMLQuantizationType[qtype]


def write_gguf(sd: dict[str, torch.Tensor], path: Path, qtype: str) -> dict[str, str]:
    """Write `sd` (float tensors) as a GGUF diffusion model at `path`, 2-D weights in `qtype`; returns
    key -> GGML type name as written. Raises if no tensor was quantized (a file that would test nothing)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path=None, arch=ARCH)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{qtype}"])
    written = {}
    for key, tensor in sd.items():
        kind = target_type(key, tensor, qtype)
        data = gguf.quants.quantize(tensor.to(torch.float32).numpy(), kind)
        writer.add_tensor(key, data, raw_dtype=kind)
        written[key] = kind.name
    writer.write_header_to_file(path=str(path))
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    quantized = [k for k, v in written.items() if v == qtype]
    if not quantized:
        raise ValueError(f"no tensor of {path.name} was stored as {qtype}")
    log.info("wrote %s: %d of %d tensors in %s", path.name, len(quantized), len(written), qtype)
    return written


def build_gguf_ltxv(path: Path, qtype: str, seed: int = 0, **overrides) -> dict[str, str]:
    """Write the tiny LTXV (GGUF_LTXV_CONFIG with `overrides`, seeded) at `path`, its large 2-D weights in
    `qtype`; returns key -> GGML type name."""
    sd, _config = gguf_state_dict(seed, **overrides)
    return write_gguf(sd, path, qtype)


def ggml_layers(module: torch.nn.Module) -> dict[str, str]:
    """name -> GGML type name of every layer whose weight is a quantized GGML tensor (ComfyUI-GGUF's
    GGMLTensor: a `tensor_type` other than F32 / F16), read from the module as loaded."""
    out = {}
    for name, layer in module.named_modules():
        weight = getattr(layer, "weight", None)
        kind = getattr(weight, "tensor_type", None)
        if kind is not None and getattr(kind, "name", str(kind)) not in ("F32", "F16"):
            out[name] = kind.name
    return out


GGUF_PACKAGE = "comfyui_gguf"
"""The module name ComfyUI-GGUF is imported under in this process (ComfyUI imports a custom node folder under
its folder name; any name works for its relative imports)."""


def import_gguf_pack(pack_dir: Path) -> ModuleType:
    """ComfyUI-GGUF at `pack_dir` imported in this process as package GGUF_PACKAGE (idempotent), as ComfyUI
    imports a custom node folder: its `__init__` registers the `unet_gguf` model folder and its nodes. ComfyUI
    must be started in this process first (comfy_runtime.start). Raises what the pack raises when it does not
    import on this ComfyUI."""
    import importlib.util
    import sys

    if GGUF_PACKAGE in sys.modules:
        return sys.modules[GGUF_PACKAGE]
    spec = importlib.util.spec_from_file_location(GGUF_PACKAGE, pack_dir / "__init__.py",
                                                  submodule_search_locations=[str(pack_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[GGUF_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for name in [n for n in sys.modules if n == GGUF_PACKAGE or n.startswith(GGUF_PACKAGE + ".")]:
            del sys.modules[name]
        raise
    return module


def gguf_skip_reason(pack_dir: Path | None) -> str | None:
    """Why the GGUF tests cannot run here (no ComfyUI-GGUF checkout, or it does not import on this ComfyUI,
    named by version), else None. The reasons never name an LTX version: they are no LTX path going quiet."""
    from .comfy_runtime import comfyui_version

    if pack_dir is None:
        return "no ComfyUI-GGUF checkout: set LTX_TDP_GGUF_DIR (default ../shared/comfyui-gguf)"
    try:
        import_gguf_pack(pack_dir)
    except Exception as e:  # noqa: BLE001  (whatever the pack raises on this ComfyUI is the reason)
        return f"ComfyUI-GGUF does not import on ComfyUI {comfyui_version()}: {type(e).__name__}: {e}"
    return None


def load_gguf_ltxv(comfy, folder: Path, qtype: str, seed: int = 0) -> Any:
    """The tiny GGUF LTXV in `qtype` (written into `folder`, a diffusion-model folder, once) through
    ComfyUI-GGUF's own UnetLoaderGGUF node (imported by `import_gguf_pack` first)."""
    import sys

    import folder_paths

    name = f"tdp_tiny_ltxv_{qtype}_{seed}.gguf"
    if not (folder / name).exists():
        build_gguf_ltxv(folder / name, qtype, seed=seed)
        folder_paths.filename_list_cache.clear()
    (model,) = comfy.run_node(sys.modules[GGUF_PACKAGE].nodes.UnetLoaderGGUF, unet_name=name)
    return model


LORA_KEY = "diffusion_model.transformer_blocks.1.ff.net.0.proj.weight"
"""The quantized Linear `with_lora` patches (a GGML layer in both QTYPES)."""


def gguf_loader(comfy: Any):
    """qtype -> the tiny LTXV as that GGUF type, loaded once by ComfyUI-GGUF's loader (for a module-scoped fixture);
    skips, saying why, where ComfyUI-GGUF or `gguf` is missing."""
    import pytest

    from .paths import gguf_pack_dir

    reason = gguf_skip_reason(gguf_pack_dir())
    if reason:
        pytest.skip(reason)
    import folder_paths

    folder, models = Path(folder_paths.get_folder_paths("diffusion_models")[0]), {}

    def load(qtype: str) -> Any:
        if qtype not in models:
            models[qtype] = load_gguf_ltxv(comfy, folder, qtype)
        return models[qtype]

    return load


def with_lora(model: Any) -> Any:
    """A clone with a LoRA-like weight difference (ComfyUI's "diff" patch) on one quantized Linear (`LORA_KEY`)."""
    from .ltx_helpers import randn

    patched = model.clone()
    shape = tuple(patched.model.diffusion_model.transformer_blocks[1].ff.net[0].proj.weight.shape)
    patched.add_patches({LORA_KEY: (randn(*shape, seed=9) * 0.5,)}, 1.0)
    return patched
