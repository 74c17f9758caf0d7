"""The pack's loader factory (ltx.loader_factory) for models whose loader registered none: ComfyUI-GGUF's tiny Q4_0
LTXV (loaded by its own UnetLoaderGGUF, ltx_tdp_devkit.tiny_gguf) and ComfyUI's own tiny LTXV.

Skips where ComfyUI has no in-process MultiGPU (0.3.75): it has no loader factories, so the pack sets none.

Invariants: the rebuilt model is a new module tree of the same class whose every weight is a new object of the
source weight's class over the same bytes (quantized weights keep their GGML type); a patch list set on one never
shows on the other; the rebuilt model computes what the source computes, bit for bit; a source whose weights hold
a patch is refused with a message; the pack's nodes set the factory on their clone only where the loader set none,
and never on the MODEL they were given.
"""

from __future__ import annotations

import pytest
import torch

from ltx_tdp_devkit import tiny_gguf
from ltx_tdp_devkit.ltx_helpers import call_model, load_ltxv, randn, tdp_2x2


@pytest.fixture(scope="module")
def gguf_q4(comfy):
    return tiny_gguf.gguf_loader(comfy)("Q4_0")


def _rebuild(patcher):
    from ltx_tdp.ltx.loader_factory import rebuild

    return rebuild(patcher.model, patcher.load_device, patcher.offload_device).model


def _weights(model) -> dict[str, torch.Tensor]:
    return dict(model.diffusion_model.named_parameters())


def test_a_gguf_model_is_rebuilt_around_the_same_quantized_bytes(comfy, gguf_q4):
    source = gguf_q4.model
    copy = _rebuild(gguf_q4)
    assert copy is not source and type(copy) is type(source) and copy.diffusion_model is not source.diffusion_model
    ours, theirs = _weights(source), _weights(copy)
    assert ours.keys() == theirs.keys() and len(ours) > 20, sorted(theirs)
    for key, weight in ours.items():
        other = theirs[key]
        assert other is not weight and type(other) is type(weight), (key, type(other), type(weight))
        assert other.data_ptr() == weight.data_ptr() or weight.numel() <= 1024, f"{key} was copied"
        assert torch.equal(other.as_subclass(torch.Tensor), weight.as_subclass(torch.Tensor)), key
    assert tiny_gguf.ggml_layers(copy) == tiny_gguf.ggml_layers(source) != {}


def test_a_patch_list_set_on_the_copy_never_shows_on_the_source(comfy, gguf_q4):
    copy = _rebuild(gguf_q4)
    key = tiny_gguf.LORA_KEY.removeprefix("diffusion_model.")
    _weights(copy)[key].patches.append(("a patch", key))
    assert _weights(gguf_q4.model)[key].patches == [], "the source's weight got the copy's patch"


def test_the_rebuilt_model_computes_what_the_source_computes_bit_for_bit(comfy, gguf_q4, model_names):
    from ltx_tdp.ltx.loader_factory import rebuild

    x = randn(1, 128, 2, 4, 4, seed=1)
    for source, context in ((gguf_q4, randn(1, 8, tiny_gguf.CAPTION_CHANNELS, seed=2)),
                            (load_ltxv(comfy, model_names), randn(1, 8, 16, seed=2))):
        copy = rebuild(source.model, source.load_device, source.offload_device)
        want, got = (call_model(m, x, 0.6, c_crossattn=context) for m in (source, copy))
        assert torch.equal(got, want), f"{type(source).__name__}: differs by {(got - want).abs().max():.3e}"


def test_a_source_whose_weights_hold_a_patch_is_refused_with_a_message(comfy, gguf_q4):
    from ltx_tdp.ltx.loader_factory import rebuild

    source = gguf_q4.model
    before = getattr(source, "current_weight_patches_uuid", None)
    source.current_weight_patches_uuid = "a patch uuid"
    try:
        with pytest.raises(RuntimeError, match="while its weights are patched in place"):
            rebuild(source)
    finally:
        source.current_weight_patches_uuid = before


def test_the_pack_sets_the_factory_on_its_clone_only_where_the_loader_set_none(comfy, gguf_q4, model_names):
    from ltx_tdp.ltx.loader_factory import rebuild
    from ltx_tdp_devkit.core_multigpu import SKIP_REASON, has_core_multigpu
    from ltx_tdp_devkit.sequence import sequence

    if not has_core_multigpu():  # no MultiGPU, no loader factories (ComfyUI 0.3.75)
        pytest.skip(f"{SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    for node in (tdp_2x2, sequence):
        patched = node(gguf_q4)
        assert patched.cached_patcher_init[0] is rebuild and patched.cached_patcher_init[1][0] is gguf_q4.model
        assert gguf_q4.cached_patcher_init is None, "the MODEL the node was given changed"
        core = load_ltxv(comfy, model_names)
        assert core.cached_patcher_init is not None
        assert node(core).cached_patcher_init == core.cached_patcher_init, "the loader's own factory was replaced"
