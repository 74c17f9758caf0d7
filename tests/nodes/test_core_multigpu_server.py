"""TDP over ComfyUI's own MultiGPU on a headless server that reports two devices. ComfyUI's official LTX-2.5
text-to-video template, with TDP on stage 2 and core's MultiGPU CFG Split added after the patcher through the real
frontend, runs stage 2's tiles on both devices in one process and gives the one-device run's result bit for bit;
the same template with one MultiGPU CFG Split on the loaded model, LTX Sequence Parallel on stage 1 and TDP on
stage 2 spreads both stages over both devices and gives the one-device run's result within the sequence path's
fp32 bound; the pack's LTX-2.5 multi-GPU example (the same layout) runs both stages on both devices as the
frontend queues it. A fault on one device fails the prompt with the device named, and the server runs the next
prompt.

HARDWARE MOCK: the server starts with LTX_TDP_TEST_FAKE_DEVICES=2, so the test node pack makes
`comfy.model_management.get_all_torch_devices` report cpu and cpu:1 (ltx_tdp_devkit.core_multigpu); the
template, the frontend, MultiGPU CFG Split's deepclone (the loader's own factory), the thread pool and the pack
are real. The tiny models and mocked text encoder and prompt enhancer are those of
tests/nodes/test_official_ltx25_templates.py. The template samples at cfg 1 (LTXVDualCFGGuider 1 / 1), where
ComfyUI's own cond split has nothing to split: the tiles are the work.

The template and example tests skip on a ComfyUI without LTX-2.5 (0.24.0, 0.3.75; marked `ltx25`), the fault test
(tiny LTXV) only where ComfyUI has no in-process MultiGPU (0.3.75).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch

from ltx_tdp_devkit.api_prompts import tdp_upscale_prompt
from ltx_tdp_devkit.latent_outputs import add_latent_saves, saved_latents
from ltx_tdp_devkit.paths import comfyui_has_ltx25
from ltx_tdp_devkit.sequence import BOUND, relative_error
from ltx_tdp_devkit.server import ComfyServer, PromptFailed
from ltx_tdp_devkit.templates import Stage2, add_tdp_to_stage2, api_id, load_template, ltx2_template_ids, stage2
from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON
from ltx_tdp_devkit.tiny_prompts import build_tiny_files, tiny_prompt

pytestmark = pytest.mark.server

TEMPLATE = "video_ltx2_5_t2v"
LAYOUT = re.compile(r"LTX TDP: model calls run as (\d+) work units \(one per tile\) over 2 devices: cpu (\d+), cpu:1 (\d+)")
DECODE_LAYOUT = re.compile(r"LTX TDP: the decode's \d+ tiles over 2 devices")
"""The tiled decode's layout line when its `device` is `all` (the LTX-2.5 multi-GPU example's setting)."""
SEQUENCE_LAYOUT = re.compile(r"LTX Sequence Parallel: model calls run with the video tokens in 2 shards by speed: "
                             r"cpu \(speed [\d.]+\), cpu:1 \(speed [\d.]+\)")
"""The sequence path's layout line. It is logged once per server process (per layout), so only the first prompt
that runs stage 1 sequence-parallel in this module's server says it: the template test below."""
CARRIED_BOUND = 5e-5
"""Stage 2's video against one device when stage 1 ran sequence-parallel. Stage 2's tiles over the devices give one
device's result bit for bit for the same input (the first test), so its whole difference is stage 1's fp32 rounding
(`stage2_input`, within BOUND) carried through the upsampler and stage 2's steps, which this random tiny model
amplifies: measured on an AMD EPYC, 2.7e-7 at stage 2's input, 9.0e-6 at its output (x 33)."""
_seeds = itertools.count(500)


def _require_ltx25(comfy_dir: Path) -> None:
    if not comfyui_has_ltx25(comfy_dir):
        pytest.skip(f"{LTX25_SKIP_REASON}: the ComfyUI in {comfy_dir} has no LTX-2.5 transformer, so its LTX-2.5 "
                    "templates cannot run")


@pytest.fixture(scope="module")
def frontend(comfy_dir, two_device_server):
    _require_ltx25(comfy_dir)  # before starting a browser for nothing
    from ltx_tdp_devkit.frontend import browser_page

    with browser_page(two_device_server.url) as page:
        yield page


@pytest.fixture(scope="module")
def tiny_names(comfy_dir, comfy_base, model_names) -> dict[str, str]:
    _require_ltx25(comfy_dir)
    from ltx_tdp_devkit.ltx25_files import build_ltx25_files

    return {**build_tiny_files(comfy_base, model_names), **build_ltx25_files(comfy_base)}


def _run(server: ComfyServer, comfy_base: Path, api: dict, names: dict, stage: Stage2, folder: str) -> dict:
    """The API prompt on the tiny models; stage 1's audio and stage 2's video and audio latents, by name."""
    prompt = tiny_prompt(api, names)
    separate = api_id(stage.path, stage.separate)
    add_latent_saves(prompt, {"stage1_audio": [api_id(stage.path, stage.audio_in[0]), stage.audio_in[1]],
                              "stage2_input": [api_id(stage.path, stage.video_in[0]), stage.video_in[1]],
                              "stage2_video": [separate, 0], "stage2_audio": [separate, 1]}, folder=folder)
    entry = server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    return saved_latents(comfy_base, entry, prompt)


@pytest.mark.ltx2
@pytest.mark.ltx25
def test_ltx25_template_with_multigpu_cfg_split_runs_stage2_tiles_on_both_devices_bit_for_bit(
        comfy_base, two_device_server, frontend, tiny_names):
    assert TEMPLATE in ltx2_template_ids(), f"the installed comfyui-workflow-templates has no {TEMPLATE}"
    template = load_template(TEMPLATE)
    stage = stage2(TEMPLATE, template)
    assert stage is not None and stage.guider_type == "LTXVDualCFGGuider", f"{TEMPLATE}: stage 2 is {stage}"

    report = frontend.load(template)
    assert report.load_error is None and not report.missing_types, report
    edit = add_tdp_to_stage2(frontend, stage)
    one_device_api = frontend.graph_to_prompt()
    _, top, right, _ = frontend.node_bounds(stage.path, [edit.patcher])
    split = frontend.add_node(stage.path, "MultiGPU_WorkUnits", (right + 40, top))
    frontend.connect(stage.path, edit.patcher, 0, split, "model")
    frontend.connect(stage.path, split, 0, stage.guider, "model")
    two_device_api = frontend.graph_to_prompt()

    split_id, patcher_id = api_id(stage.path, split), api_id(stage.path, edit.patcher)
    assert two_device_api[split_id]["class_type"] == "MultiGPU_WorkUnits", two_device_api.get(split_id)
    assert two_device_api[split_id]["inputs"] == {"model": [patcher_id, 0], "max_gpus": 2}, two_device_api[split_id]
    assert two_device_api[api_id(stage.path, stage.guider)]["inputs"]["model"] == [split_id, 0], "guider not on the split"

    one = _run(two_device_server, comfy_base, one_device_api, tiny_names, stage, f"{TEMPLATE}_one_device")
    log_before = len(two_device_server.log_text())
    two = _run(two_device_server, comfy_base, two_device_api, tiny_names, stage, f"{TEMPLATE}_two_devices")
    layouts = LAYOUT.findall(two_device_server.log_text()[log_before:])
    assert layouts and all(int(here) and int(there) for _, here, there in layouts), (
        f"stage 2's tiles did not run on both devices; the pack logged {layouts}")

    for part in ("stage2_video", "stage2_audio"):
        got, want = two[part], one[part]
        assert got.shape == want.shape and torch.equal(got, want), (
            f"{part}: two devices differ from one by up to {(got - want).abs().max():.3e}")
    assert torch.equal(two["stage2_audio"], two["stage1_audio"]), "held audio: stage 2 changed stage 1's audio"


@pytest.mark.ltx2
@pytest.mark.ltx25
def test_ltx25_template_with_sequence_parallel_on_stage1_and_tdp_on_stage2_spreads_both_stages(
        comfy_base, two_device_server, frontend, tiny_names):
    """Stage 1's video tokens are sharded over both devices (LTX Sequence Parallel), stage 2's tiles spread over them
    (TDP), both on one MultiGPU CFG Split of the loaded model, as the frontend builds it from the official template."""
    template = load_template(TEMPLATE)
    stage = stage2(TEMPLATE, template)
    assert stage is not None and len(stage.stage1_guiders) == 1, f"{TEMPLATE}: stage 1's guiders {stage}"
    (stage1_guider,) = stage.stage1_guiders
    report = frontend.load(template)
    assert report.load_error is None and not report.missing_types, report
    edit = add_tdp_to_stage2(frontend, stage)
    one_device_api = frontend.graph_to_prompt()
    origin = api_id(stage.path, stage.model_origin[0])
    assert one_device_api[api_id(stage.path, stage1_guider)]["inputs"]["model"] == [origin, stage.model_origin[1]], (
        "stage 1's guider does not take the model stage 2's patcher takes")
    _, top, right, _ = frontend.node_bounds(stage.path, [edit.patcher])
    split = frontend.add_node(stage.path, "MultiGPU_WorkUnits", (right + 40, top))
    sequence = frontend.add_node(stage.path, "LTXTDPSequenceParallel", (right + 40, top + 140))
    frontend.connect(stage.path, *stage.model_origin, split, "model")
    frontend.connect(stage.path, split, 0, edit.patcher, "model")
    frontend.connect(stage.path, split, 0, sequence, "model")
    frontend.connect(stage.path, sequence, 0, stage1_guider, "model")
    two_device_api = frontend.graph_to_prompt()

    split_id, sequence_id = api_id(stage.path, split), api_id(stage.path, sequence)
    node = two_device_api[sequence_id]
    assert (node["class_type"], node["inputs"]) == ("LTXTDPSequenceParallel", {"model": [split_id, 0]}), node
    assert two_device_api[api_id(stage.path, stage1_guider)]["inputs"]["model"] == [sequence_id, 0]
    assert two_device_api[api_id(stage.path, edit.patcher)]["inputs"]["model"] == [split_id, 0]

    one = _run(two_device_server, comfy_base, one_device_api, tiny_names, stage, f"{TEMPLATE}_sp_one_device")
    log_before = len(two_device_server.log_text())
    two = _run(two_device_server, comfy_base, two_device_api, tiny_names, stage, f"{TEMPLATE}_sp_two_devices")
    log = two_device_server.log_text()[log_before:]
    assert SEQUENCE_LAYOUT.search(log), f"stage 1 did not run sequence-parallel on both devices; the log:\n{log[-3000:]}"
    layouts = LAYOUT.findall(log)
    assert layouts and all(int(here) and int(there) for _, here, there in layouts), (
        f"stage 2's tiles did not run on both devices; the pack logged {layouts}")
    for part, bound in (("stage1_audio", BOUND), ("stage2_input", BOUND), ("stage2_audio", BOUND),
                        ("stage2_video", CARRIED_BOUND)):
        err = relative_error(two[part], one[part])
        assert two[part].shape == one[part].shape and err <= bound, (
            f"{part}: two devices differ from one by {err:.3e} (relative), bound {bound}")
    assert torch.equal(two["stage2_audio"], two["stage1_audio"]), "held audio: stage 2 changed stage 1's audio"


@pytest.mark.ltx2
@pytest.mark.ltx25
def test_the_ltx25_multigpu_example_runs_both_stages_on_both_devices(two_device_server, frontend, tiny_names):
    """The pack's LTX-2.5 multi-GPU example (one MultiGPU CFG Split on the loaded model, `gpus` on its face; LTX
    Sequence Parallel on stage 1, the TDP patcher on stage 2) as the frontend queues it, on the tiny models."""
    from ltx_tdp_devkit.paths import PACK_ROOT
    from ltx_tdp_devkit.workflow_format import load

    report = frontend.load(load(PACK_ROOT / "example_workflows" / "ltx25_tdp_4k_two_stage_multigpu.json"))
    assert report.load_error is None and not report.missing_types, report
    prompt = tiny_prompt(frontend.graph_to_prompt(), tiny_names)
    splits = [n for n in prompt.values() if n["class_type"] == "MultiGPU_WorkUnits"]
    assert [n["inputs"]["max_gpus"] for n in splits] == [2], f"the example's MultiGPU CFG Split nodes: {splits}"
    (split_id,) = [k for k, n in prompt.items() if n["class_type"] == "MultiGPU_WorkUnits"]
    sequence = [n for n in prompt.values() if n["class_type"] == "LTXTDPSequenceParallel"]
    patcher = [n for n in prompt.values() if n["class_type"] == "LTXTDPModelPatcher"]
    assert [n["inputs"]["model"] for n in sequence + patcher] == [[split_id, 0]] * 2, (sequence, patcher)
    log_before = len(two_device_server.log_text())
    entry = two_device_server.run(prompt, timeout=900)
    assert entry["status"]["status_str"] == "success", entry["status"]
    log = two_device_server.log_text()[log_before:]
    layouts = LAYOUT.findall(log)
    assert layouts and all(int(here) and int(there) for _, here, there in layouts), (
        f"the example's stage 2 did not run on both devices; the pack logged {layouts}")
    assert SEQUENCE_LAYOUT.search(log), f"the example's stage 1 did not run sequence-parallel; the log:\n{log[-3000:]}"
    assert DECODE_LAYOUT.search(log), f"the example's tiled decode did not run on both devices; the log:\n{log[-3000:]}"


def _tiny_prompt_with_split(model_names: dict, fail: bool) -> dict:
    seed = next(_seeds)
    prompt = tdp_upscale_prompt(unet_name=model_names["ltxv"], vae_name=model_names["vae"], width=256, height=256,
                                length=9, seed=seed, filename_prefix=f"tdp_two_devices_{seed}")
    prompt["split"] = {"class_type": "MultiGPU_WorkUnits", "inputs": {"model": ["tdp", 0], "max_gpus": 2}}
    prompt["stage2"]["inputs"]["model"] = ["split", 0]
    if fail:
        prompt["fail"] = {"class_type": "TDPTestFailOnDevice", "inputs": {"model": ["split", 0]}}
        prompt["stage2"]["inputs"]["model"] = ["fail", 0]
    return prompt


def test_a_fault_on_one_device_names_it_and_the_server_runs_the_next_prompt(two_device_server, model_names):
    with pytest.raises(PromptFailed) as failed:
        two_device_server.run(_tiny_prompt_with_split(model_names, fail=True), timeout=300)
    message = str(failed.value)
    assert "failed on cpu:1" in message and "simulated fault on a MultiGPU clone" in message, message
    entry = two_device_server.run(_tiny_prompt_with_split(model_names, fail=False), timeout=300)
    assert entry["status"]["status_str"] == "success", entry["status"]
