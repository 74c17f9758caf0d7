"""The tiny files of the LTX-2.5 templates load through the templates' own loaders as what they stand for."""

from __future__ import annotations

import pytest

from ltx_tdp_devkit.paths import comfyui_has_ltx25
from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON

pytestmark = [pytest.mark.ltx2, pytest.mark.ltx25]


@pytest.fixture(scope="module")
def ltx25_names(comfy, comfy_dir, comfy_base):
    if not comfyui_has_ltx25(comfy_dir):
        pytest.skip(f"{LTX25_SKIP_REASON}: the ComfyUI in {comfy_dir} has no LTX-2.5 transformer")
    from ltx_tdp_devkit.ltx25_files import build_ltx25_files

    names = build_ltx25_files(comfy_base)
    import folder_paths

    folder_paths.filename_list_cache.clear()  # the folders were listed before these files existed
    return names


def test_unet_loader_loads_the_tiny_ltx25_transformer_with_int8_convrot_layers_and_the_keyframe_marker(comfy, ltx25_names):
    from ltx_tdp_devkit.tiny_quant import CONVROT_GROUP, QUANTIZED_PREFIX, quantized_layers

    (model,) = comfy.run_node("UNETLoader", unet_name=ltx25_names["ltx25"], weight_dtype="default")
    dm = model.model.diffusion_model
    assert type(dm).__name__ == "LTXAVModel" and dm.keyframes_abs_pos_embedding is not None, type(dm)
    assert dm.cross_attention_adaln and dm.caption_proj_before_connector, "the LTX-2.5 switches did not load"
    layers = quantized_layers(dm)
    linears = {n for n, m in dm.named_modules() if n.startswith(QUANTIZED_PREFIX) and type(m).__name__ == "Linear"}
    assert layers and set(layers) == linears, f"quantized: {len(layers)} layers of {len(linears)} block Linears"
    modules = dict(dm.named_modules())
    found = {(layout, modules[n].quant_format, modules[n].weight.params.convrot, modules[n].weight.params.convrot_groupsize)
             for n, layout in layers.items()}
    assert found == {("TensorWiseINT8Layout", "int8_tensorwise", True, CONVROT_GROUP)}, found


def test_vae_loader_loads_the_video_vae_as_ltx25s_diffusion_vae_and_the_audio_vae_as_ltx_audio(comfy, ltx25_names):
    (video,) = comfy.run_node("VAELoader", vae_name=ltx25_names["ltx25_vae"])
    (audio,) = comfy.run_node("VAELoader", vae_name=ltx25_names["ltx25_audio_vae"])
    assert type(video.first_stage_model).__name__ == "CausalDiffusionVAE", type(video.first_stage_model)
    assert type(audio.first_stage_model).__name__ == "AudioVAE", type(audio.first_stage_model)


def test_load_video_reads_the_tiny_clip_with_its_frames_sound_and_frame_rate(comfy, ltx25_names):
    (video,) = comfy.run_node("LoadVideo", file=ltx25_names["video"])
    images, audio, fps, _ = comfy.run_node("GetVideoComponents", video=video)
    assert tuple(images.shape) == (9, 128, 192, 3), f"frames {tuple(images.shape)}, written 9 x 128 x 192"
    assert fps == 24.0, f"frame rate {fps}, written 24"
    assert audio is not None and audio["waveform"].abs().max() > 0.1, "the clip's sound track is missing or silent"
