"""The GPU check's steps: which run, in which order, with which limits, and which a ComfyUI tree cannot run.

Each step is a function of a module of this folder, run in its own process by check.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    name: str
    module: str
    function: str
    gpu_limit_s: int
    """Time limit on the GPU (process start, imports and model construction included)."""
    needs_ltx2: bool = False
    needs_ltx25: bool = False


STEPS = (
    Step("one_by_one", "correctness", "one_by_one_bit_identical", 45),
    Step("bf16_vs_fp32", "correctness", "two_by_two_bf16_matches_fp32_cpu", 45),
    Step("decode_one_tile", "correctness", "one_tile_decode_bit_identical", 45),
    Step("group_two_ranks", "correctness", "two_rank_group_matches_single_process", 90),
    Step("sequence_parallel", "sequence_check", "sequence_parallel_on_one_device", 45),
    Step("dynamic_vram_lora", "comfy_defaults", "lora_under_dynamic_vram", 90),
    Step("memory_estimate", "comfy_defaults", "memory_comfyui_is_asked_for", 45),
    Step("decode_noise_field", "decode_checks", "diffusion_noise_field", 60),
    Step("decode_tile_memory", "decode_checks", "decoded_tile_memory", 45),
    Step("decode_node_one_device", "one_device", "decode_node_one_device", 45),
    Step("exchange_cost", "exchange", "exchange_cost", 60),
    Step("ltx25_fp8", "ltx25", "ltx25_fp8", 150, needs_ltx2=True, needs_ltx25=True),
    Step("ltx25_int8", "ltx25", "ltx25_int8", 150, needs_ltx2=True, needs_ltx25=True),
    Step("transformer_tiles", "real_size", "transformer_tiles", 150, needs_ltx2=True),
    Step("vae_tiled", "real_size", "vae_tiled", 120),
    Step("transformer_untiled", "real_size", "transformer_untiled", 150, needs_ltx2=True),
    Step("vae_untiled", "real_size", "vae_untiled", 100),
)
"""In order of importance: what runs first is what a short budget keeps."""

GPU_BUDGET_S = 500
"""All steps together on a GPU: 8 min 20 s, inside the 10 minutes the check may take on one H200 (run.sh's set-up,
the last step's stop and the report take seconds)."""
WORK_DIR_MODULES = ("correctness", "comfy_defaults", "decode_checks", "sequence_check", "one_device")
"""Step modules whose functions take the work folder (tiny models saved there), not the sizes."""
SMOKE_LIMIT_S = 300
SMOKE_BUDGET_S = 1500
"""On a slow, shared CPU the smoke run's limits only catch a hang; its sizes take seconds."""
MIN_STEP_S = 20
"""A step is not started with less time than this left in the budget (it is recorded as not run)."""


def comfy_has_ltx2(comfy_dir: Path) -> bool:
    return (comfy_dir / "comfy" / "ldm" / "lightricks" / "av_model.py").is_file()


def skip_reason(step: Step, comfy_dir: Path, version: str) -> str | None:
    """Why `step` cannot run on this ComfyUI tree, or None. An LTX-2.5 step's reason starts with the test
    suite's LTX25_SKIP_REASON (ltx_tdp_devkit.tiny_models, on the PYTHONPATH that run.sh sets)."""
    from ltx_tdp_devkit.paths import comfyui_has_ltx25
    from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON
    if step.needs_ltx25 and not comfyui_has_ltx25(comfy_dir):
        return (f"{LTX25_SKIP_REASON}: ComfyUI {version} has no LTX-2.5 transformer (no keyframe marker, "
                "use_keyframes_abs_pos_embedding); carry ComfyUI 0.33.0 (bash bench/gpu/prepare.sh)")
    if step.needs_ltx2 and not comfy_has_ltx2(comfy_dir):
        return (f"ComfyUI {version} has no LTX-2 (comfy/ldm/lightricks/av_model.py); LTX-2 steps need a current "
                "ComfyUI (tested: 0.24.0, 0.33.0)")
    return None
