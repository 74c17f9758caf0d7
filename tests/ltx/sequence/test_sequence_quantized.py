"""LTX Sequence Parallel on quantized checkpoints, as users load them (fp8 and LTX-2.5's int8-convrot): the
transformer blocks' Linear weights stored the way ComfyUI stores quantized checkpoints (`comfy_quant`), loaded by
UNETLoader, computing with comfy-kitchen's QuantizedTensor on every MultiGPU copy. Sharding cuts only tokens, so
2 devices equal one device within the stated bound.

HARDWARE MOCK: `fake_devices(2)` makes ComfyUI report cpu, cpu:1 (see `ltx_tdp_devkit.core_multigpu`); the
quantized model, core's deepclones, its MultiGPUThreadPool and the pack's dispatch are real.
"""

from __future__ import annotations

import pytest

from ltx_tdp_devkit import tiny_quant
from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
from ltx_tdp_devkit.ltx_helpers import ksample, randn
from ltx_tdp_devkit.sequence import BOUND, LTXV_LAYERS, BlockRows, relative_error, sequence

pytestmark = pytest.mark.usefixtures("core_multigpu")


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "int8_convrot"])
def test_a_quantized_model_on_two_devices_equals_one_device(comfy, comfy_base, fmt):
    import folder_paths

    if fmt not in tiny_quant.available_formats():
        pytest.skip(f"this ComfyUI does not load {fmt} checkpoints")
    name = f"tdp_tiny_ltxv_{fmt}_{LTXV_LAYERS}_layers.safetensors"
    path = comfy_base / "models" / "diffusion_models" / name
    if not path.exists():
        tiny_quant.build_quantized_ltxv(path, fmt, num_layers=LTXV_LAYERS)
        folder_paths.filename_list_cache.clear()
    (model,) = comfy.run_node("UNETLoader", unet_name=name, weight_dtype="default")
    layers = tiny_quant.quantized_layers(model.model.diffusion_model)
    assert layers, f"{fmt}: no layer of the model loaded quantized"
    latent = {"samples": randn(1, 128, 3, 8, 10, seed=2)}
    single = ksample(comfy, model, latent, cfg=1.0)
    rows = BlockRows()
    with fake_devices(2):
        multi = ksample(comfy, cfg_split(sequence(rows.on(model, LTXV_LAYERS)), 2), latent, cfg=1.0)
    err = relative_error(multi, single)
    assert err <= BOUND, f"{fmt}: 2 devices differ from one device by {err:.3e} (relative), bound {BOUND}"
    assert set(rows.rows) == {120}, f"{fmt}: blocks ran {sorted(set(rows.rows))} of the 240 video tokens, not 2 shards"
