"""The ComfyUI internals the pack relies on (ltx.comfy_internals), pinned on the ComfyUI under test.

Each static guard passes on the real code and fails against a stand-in: an edited copy of the same ComfyUI file,
written into the test's temporary folder from the ComfyUI in use (the shared trees stay untouched), with one
member, slot or parameter renamed as a newer ComfyUI might. What only a run shows is pinned on a real call: the
keys LTXV's and LTX-2's block replace receive, and how `wrap_attn` calls an attention override (plain tensors,
attention tensor containers unwrapped). A changed internal makes the node that needs it refuse with one line that
names the ComfyUI version and the node, and logs that line when the pack loads.

Mocked: none of ComfyUI. The refusal tests replace the pack's own list of problems (`comfy_internals.problems`)
with one found on a stand-in.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest
import torch

from ltx_tdp.ltx import comfy_internals as ci
from ltx_tdp.ltx.errors import UnsupportedInput
from ltx_tdp_devkit.ltx_helpers import conditioning, load_ltxv, randn


def internal(name: str) -> ci.Internal:
    (found,) = [i for i in ci.INTERNALS if i.name == name]
    return found


def test_every_internal_is_as_the_pack_assumes_on_this_comfyui(comfy):
    from ltx_tdp_devkit.core_multigpu import has_core_multigpu

    assert len(ci.INTERNALS) >= 10
    assert ci.problems() == (), "\n".join(ci.message(i, p) for i, p in ci.problems())
    absent = [i.qualified for i in ci.INTERNALS if ci._resolve(i)[1] == "absent"]
    if has_core_multigpu():  # ComfyUI 0.24+: every module is there
        assert absent == [], f"ComfyUI {comfy.comfyui_version()} lacks {absent}"


def standin(tmp_path: Path, module: str, old: str, new: str, more: tuple[tuple[str, str], ...] = ()):
    """An edited copy of ComfyUI's `module` (its file as this ComfyUI has it, every `old` replaced by `new`, then
    each pair of `more`), imported from `tmp_path` inside the same package, so its relative imports resolve;
    skipped where this ComfyUI has no such module."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.skip(f"this ComfyUI has no {module}")
    text = Path(spec.origin).read_text()
    for before, after in ((old, new), *more):
        assert text.count(before) >= 1, f"{module} no longer has {before!r}: update the stand-in"
        text = text.replace(before, after)
    path = tmp_path / f"standin_{module.rsplit('.', 1)[-1]}.py"
    path.write_text(text)
    name = f"{module.rsplit('.', 1)[0]}.standin_{module.rsplit('.', 1)[-1]}"
    loaded = importlib.util.spec_from_file_location(name, path)
    out = importlib.util.module_from_spec(loaded)
    sys.modules[name] = out
    try:
        loaded.loader.exec_module(out)
    finally:
        del sys.modules[name]
    return out


STANDINS = [
    ("MultiGPUThreadPool", "comfy.multigpu", "def get_result(self", "def collect_result(self",
     "has no get_result"),
    ("MultiGPUThreadPool", "comfy.multigpu", "def submit(self, device: torch.device, fn,",
     "def submit(self, device: torch.device, work,", "submit takes no fn"),
    ("CompressedTimestep", "comfy.ldm.lightricks.av_model", "'feature_dim')", "'channels')", "slots"),
    ("GuideAttentionMask", "comfy.ldm.lightricks.model", '"tracked_mask")', '"tracked")', "slots"),
    ("VideoVAE", "comfy.ldm.lightricks.vae.causal_video_autoencoder", "def decode(self, x, output_buffer=None)",
     "def decode(self, x, out=None)", "decode takes no output_buffer"),
    ("get_max_chunk_size", "comfy.ldm.lightricks.vae.causal_video_autoencoder", "def get_max_chunk_size(",
     "def max_chunk_size(", "has no get_max_chunk_size"),
    ("ModelPatcher", "comfy.model_patcher", "def deepclone_multigpu(", "def multigpu_deepclone(",
     "has no deepclone_multigpu"),
    ("SymmetricPatchifier", "comfy.ldm.lightricks.symmetric_patchifier", "def patchify(", "def to_tokens(",
     "has no patchify"),
]


@pytest.mark.parametrize("name,module,old,new,said", STANDINS, ids=[f"{s[0]}-{s[4]}" for s in STANDINS])
def test_a_guard_passes_on_the_real_code_and_names_what_a_stand_in_changed(comfy, tmp_path, name, module, old, new,
                                                                           said):
    guard = internal(name)
    real, why = ci._resolve(guard)
    if why == "absent":
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no {guard.only_with or guard.module}")
    assert ci.problem_with(guard, real) is None
    edited = standin(tmp_path, module, old, new)
    found = ci.problem_with(guard, getattr(edited, name)) if hasattr(edited, name) else f"has no {name}"
    assert found is not None and said in found, f"{guard.qualified}: the stand-in gave {found!r}"


def test_a_wrapper_kind_renamed_is_named():
    class WrappersMP:  # a stand-in of comfy.patcher_extension.WrappersMP with CALC_COND_BATCH renamed
        OUTER_SAMPLE = APPLY_MODEL = PREPARE_SAMPLING = DIFFUSION_MODEL = "x"
        CALCULATE_COND_BATCH = "x"

    assert "has no CALC_COND_BATCH" in ci.problem_with(internal("WrappersMP"), WrappersMP)


def test_a_memory_estimate_without_its_input_shape_is_named():
    class BaseModel:  # the estimate's first parameter renamed
        def memory_required(self, shape, cond_shapes=None): ...

    assert "memory_required takes no input_shape" in ci.problem_with(internal("BaseModel"), BaseModel)


def _block_keys(comfy, model, latent: dict, width: int) -> set[str]:
    """The keys LTX's ("double_block", 0) replace receives in one sampling step of `model` (text `width` wide)."""
    from ltx_tdp_devkit.ltx_helpers import ksample

    seen: set[str] = set()

    def replace(args, extra):
        seen.update(args)
        return extra["original_block"](args)

    m = model.clone()
    m.set_model_patch_replace(replace, "dit", "double_block", 0)
    ksample(comfy, m, latent, steps=1, cfg=1.0, positive=conditioning(1, dim=width),
            negative=conditioning(2, dim=width))
    return seen


def _check_block_keys(keys: set[str], model_class: str) -> None:
    known, cut = ci.BLOCK_KEYS[model_class], ci.BLOCK_KEYS_CUT[model_class]
    assert keys <= known, f"{model_class}: unknown block keys {sorted(keys - known)}: decide in blocks.py, list them"
    assert cut <= keys, f"{model_class}: the block replace no longer receives {sorted(cut - keys)}"


def test_the_keys_an_ltxv_block_replace_receives_are_the_ones_listed(comfy, model_names):
    model = load_ltxv(comfy, model_names)
    keys = _block_keys(comfy, model, {"samples": randn(1, 128, 2, 4, 4, seed=1)}, 16)
    _check_block_keys(keys, type(model.model.diffusion_model).__name__)


def test_a_block_key_renamed_in_a_stand_in_fails_the_check_naming_it(comfy, model_names, tmp_path):
    """A newer LTXV whose block replace gets `rope` for `pe` (an edited copy of ComfyUI's lightricks model file,
    its `_process_transformer_blocks` put on the model with ComfyUI's object patch): the check names the key."""
    import types

    edited = standin(tmp_path, "comfy.ldm.lightricks.model", '"pe": pe', '"rope": pe',
                     more=(('pe=args["pe"]', 'pe=args["rope"]'),))
    if not hasattr(edited.LTXVModel, "_process_transformer_blocks"):
        pytest.skip(f"ComfyUI {comfy.comfyui_version()}'s LTXV runs its blocks inside forward (no block method)")
    model = load_ltxv(comfy, model_names).clone()
    dm = model.model.diffusion_model
    model.add_object_patch("diffusion_model._process_transformer_blocks",
                           types.MethodType(edited.LTXVModel._process_transformer_blocks, dm))
    keys = _block_keys(comfy, model, {"samples": randn(1, 128, 2, 4, 4, seed=1)}, 16)
    assert "rope" in keys and "pe" not in keys, sorted(keys)
    with pytest.raises(AssertionError, match="rope"):
        _check_block_keys(keys, type(dm).__name__)


def test_the_keys_an_ltx2_block_replace_receives_are_the_ones_listed(comfy, ltxav):
    video, audio = randn(1, 128, 2, 4, 4, seed=1), randn(1, 8, 5, 16, seed=2)
    (latent,) = comfy.run_node("LTXVConcatAVLatent", video_latent={"samples": video},
                               audio_latent={"samples": audio, "type": "audio"})
    keys = _block_keys(comfy, ltxav, latent, 32)
    _check_block_keys(keys, type(ltxav.model.diffusion_model).__name__)


def override_call_problems(attention) -> list[str]:
    """What differs, in `attention` (ComfyUI's attention module or a stand-in), from the override call the pack
    assumes (`OVERRIDE_CALL`): `func`, then q, k, v as the plain tensors given (containers unwrapped), then heads;
    and the override's result returned. Empty when all holds."""
    calls, problems = [], []

    def override(*args, **kwargs):
        calls.append(args)
        return args[0](*args[1:], **kwargs)

    q, k, v = (randn(1, 6, 8, seed=s) for s in (1, 2, 3))
    want = attention.optimized_attention(q, k, v, 2)
    kinds = [("plain", lambda t: t)]
    if hasattr(attention, "AttentionTensorContainer"):  # ComfyUI 0.33 has them; newer LTX code passes them
        kinds.append(("containers", attention.AttentionTensorContainer))
    for kind, wrap in kinds:
        try:
            got = attention.optimized_attention(wrap(q), wrap(k), wrap(v), 2,
                                                transformer_options={"optimized_attention_override": override})
        except Exception as e:  # noqa: BLE001  (what a changed call makes the override's attention raise)
            problems.append(f"{kind}: the call raised {type(e).__name__}: {e}")
            got = None
        if len(calls) != 1:
            problems.append(f"{kind}: the override ran {len(calls)} times")
            continue
        named = dict(zip(ci.OVERRIDE_CALL, calls.pop()))
        if not callable(named["func"]) or named["heads"] != 2:
            problems.append(f"{kind}: func {named['func']!r}, heads {named['heads']!r}")
        problems += [f"{kind}: the override got {type(named[n]).__name__} as {n}"
                     for n, t in (("q", q), ("k", k), ("v", v))
                     if type(named[n]) is not torch.Tensor or named[n] is not t]
        if not problems and (got is None or not torch.equal(got, want)):
            problems.append(f"{kind}: the result differs from the attention without the override")
    return problems


def test_an_attention_override_is_called_with_func_and_plain_q_k_v_heads_containers_unwrapped(comfy):
    import comfy.ldm.modules.attention as attention

    assert override_call_problems(attention) == []


def test_a_wrap_attn_that_hands_an_override_containers_is_named(comfy, tmp_path):
    """A stand-in whose `wrap_attn` no longer unwraps containers before the override: the pin names it."""
    import comfy.ldm.modules.attention as attention

    if not hasattr(attention, "AttentionTensorContainer"):
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no AttentionTensorContainer")
    unwrap = "args = tuple(container.take() for container in containers) + args[3:]\n" \
             "                        return optimized_attention_override"
    edited = standin(tmp_path, "comfy.ldm.modules.attention", unwrap,
                     "return optimized_attention_override")
    found = override_call_problems(edited)
    assert any("containers: the override got AttentionTensorContainer as q" in p for p in found), found


@pytest.fixture
def one_problem(monkeypatch, tmp_path, comfy):
    """The pack's list of problems replaced by one a stand-in shows (MultiGPUThreadPool.get_result renamed)."""
    guard = internal("MultiGPUThreadPool")
    if ci._resolve(guard)[1] == "absent":
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no comfy.multigpu")
    edited = standin(tmp_path, "comfy.multigpu", "def get_result(self", "def collect_result(self")
    found = ((guard, ci.problem_with(guard, edited.MultiGPUThreadPool)),)
    monkeypatch.setattr(ci, "problems", lambda: found)
    return found


def _one_line(text: str, comfy, use: str) -> None:
    assert "\n" not in text and f"ComfyUI {comfy.comfyui_version()}" in text and use in text, text
    assert "MultiGPUThreadPool has no get_result" in text, text


def test_a_use_needing_a_changed_internal_refuses_in_one_line_and_one_gpu_still_runs(comfy, one_problem,
                                                                                        model_names):
    """With MultiGPU's thread pool changed: LTX Sequence Parallel refuses at the node, TDP tiles over MultiGPU CFG
    Split at their first model call (before any tile runs), each with the line naming the ComfyUI version and the
    use; the TDP patcher on one GPU is not stopped by what only MultiGPU needs. HARDWARE MOCK: fake_devices(2)."""
    from ltx_tdp_devkit.core_multigpu import cfg_split, fake_devices
    from ltx_tdp_devkit.ltx_helpers import ksample, tdp_2x2
    from ltx_tdp_devkit.sequence import sequence

    model = load_ltxv(comfy, model_names)
    with pytest.raises(UnsupportedInput) as refused:
        sequence(model)
    _one_line(str(refused.value), comfy, ci.SEQUENCE)
    latent = {"samples": randn(1, 128, 2, 8, 8, seed=1)}
    one_gpu = ksample(comfy, tdp_2x2(model), latent, steps=1)
    assert torch.isfinite(one_gpu).all()
    with fake_devices(2):
        split = cfg_split(tdp_2x2(model), 2)
        with pytest.raises(UnsupportedInput) as failed:
            ksample(comfy, split, latent, steps=1)
    _one_line(str(failed.value), comfy, ci.TILES_ON_DEVICES)


def test_the_pack_logs_each_changed_internal_once_at_load(comfy, one_problem, caplog):
    import asyncio

    from ltx_tdp import comfy_entrypoint

    with caplog.at_level(logging.WARNING):
        asyncio.run(asyncio.run(comfy_entrypoint()).get_node_list())
    lines = [r.getMessage() for r in caplog.records if "MultiGPUThreadPool has no get_result" in r.getMessage()]
    assert len(lines) == 1 and f"ComfyUI {comfy.comfyui_version()}" in lines[0], lines


def test_the_docs_list_every_internal():
    from ltx_tdp_devkit.paths import PACK_ROOT

    text = (PACK_ROOT / "docs" / "comfyui-internals.md").read_text()
    unlisted = [i.qualified for i in ci.INTERNALS if f"`{i.qualified}`" not in text]
    assert not unlisted, f"docs/comfyui-internals.md does not list {unlisted}"
