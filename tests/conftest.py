"""Shared fixtures: the pack as package `ltx_tdp`, ComfyUI in-process, tiny real models, a headless server.

Tests that need ComfyUI skip (with the reason) when no ComfyUI tree is configured; `scripts/test.sh`
always configures one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# Intel MKL's fp32 GEMM may round differently depending on the memory alignment of its operands unless its
# conditional numerical reproducibility is strict; the bit-for-bit comparisons of a worker group against one
# process (tests/multigpu) then differed by up to 1e-6 on an AMD EPYC (AVX-512) machine for layers computed from
# an on-the-fly weight. Read by MKL in this process and inherited by every worker it starts; set before torch loads.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

import pytest
import torch

from ltx_tdp_devkit import comfy_runtime
from ltx_tdp_devkit.pack import import_pack
from ltx_tdp_devkit.paths import PACK_ROOT, TEST_NODE_PACK, comfyui_dir
from ltx_tdp_devkit.server import ComfyServer, prepare_base_dir

import_pack()

REQUIRE_LTX2 = os.environ.get("LTX_TDP_REQUIRE_LTX2") == "1"
"""Set by CI's ComfyUI 0.33.0 and 0.24.0 runs: there an LTX-2 test that skips is a failure, never a quiet pass."""


def _is_ltx2_skip(item: pytest.Item, reason: str) -> bool:
    """Whether a skip counts as a quiet LTX path under REQUIRE_LTX2. An LTX-2.5 test (marked `ltx25`, or skipping
    with tiny_models.LTX25_SKIP_REASON) may skip only on a ComfyUI older than 0.32 (0.24, 0.3.75), judged by the
    tree's version, never by what the pack detects; any other LTX-2 skip always counts."""
    from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON, ltx25_expected

    if item.get_closest_marker("ltx25") is not None or LTX25_SKIP_REASON in reason:
        return comfyui_dir() is not None and ltx25_expected(_comfyui_version())
    return item.get_closest_marker("ltx2") is not None or "LTX-2" in reason


def _comfyui_version() -> str:
    try:
        return comfy_runtime.comfyui_version()
    except ImportError:  # ComfyUI not started in this process yet: read the tree's version file
        text = (comfyui_dir() / "comfyui_version.py").read_text()
        return text.split("__version__", 1)[1].split('"')[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_LTX2 and report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if _is_ltx2_skip(item, reason):
            report.outcome = "failed"
            report.longrepr = (f"LTX_TDP_REQUIRE_LTX2=1: this LTX-2 test skipped on a runtime that must have LTX-2: "
                               f"{reason}")

MODEL_FILES = {
    "ltxv": "diffusion_models/tdp_tiny_ltxv.safetensors",
    "ltxav": "diffusion_models/tdp_tiny_ltxav.safetensors",
    "vae": "vae/tdp_tiny_ltx_vae.safetensors",
    "ltx25": "diffusion_models/tdp_tiny_ltx25.safetensors",
}


@pytest.fixture(scope="session")
def comfy_dir() -> Path:
    path = comfyui_dir()
    if path is None:
        pytest.skip("no ComfyUI tree: run through scripts/test.sh or set COMFYUI_DIR")
    return path


@pytest.fixture(scope="session")
def comfy_base(tmp_path_factory: pytest.TempPathFactory, comfy_dir: Path) -> Path:
    """A ComfyUI base directory holding the tiny models (shared by in-process ComfyUI and the server)."""
    base = tmp_path_factory.mktemp("comfy_base")
    comfy_runtime.start(comfy_dir, base)
    from ltx_tdp_devkit import tiny_models

    models_dir = base / "models"
    tiny_models.build_ltxv(models_dir / MODEL_FILES["ltxv"])
    tiny_models.build_vae(models_dir / MODEL_FILES["vae"])
    if tiny_models.has_ltxav():
        tiny_models.build_ltxav(models_dir / MODEL_FILES["ltxav"])
    if tiny_models.has_ltx25():
        tiny_models.build_ltx25(models_dir / MODEL_FILES["ltx25"])
    import folder_paths

    folder_paths.filename_list_cache.clear()  # the model folders were listed (empty) while ComfyUI started
    return prepare_base_dir(base, PACK_ROOT, TEST_NODE_PACK, {})


@pytest.fixture(scope="session")
def comfy(comfy_base: Path):
    """ComfyUI in this process (CPU), with the tiny models in its model folders."""
    return comfy_runtime


@pytest.fixture(scope="session")
def model_names() -> dict[str, str]:
    """File names of the tiny models as ComfyUI's loaders list them."""
    return {k: Path(v).name for k, v in MODEL_FILES.items()}


@pytest.fixture(scope="session")
def comfy_server(comfy_dir: Path, comfy_base: Path):
    """A headless ComfyUI with this pack and the test node pack, torn down after the session."""
    import sys

    with ComfyServer(comfy_dir=comfy_dir, base_dir=comfy_base, python=sys.executable) as server:
        yield server


@pytest.fixture(scope="session")
def two_device_server(comfy_dir: Path, comfy_base: Path):
    """A headless ComfyUI of its own whose test node pack fakes two CPU devices (HARDWARE MOCK: ComfyUI is told the
    CPU is cpu and cpu:1, `ltx_tdp_devkit.core_multigpu`); skips where this ComfyUI has no in-process MultiGPU. One
    for the session: the model path's and the decode's server tests share it."""
    import sys

    from ltx_tdp_devkit.core_multigpu import FAKE_DEVICES_ENV, SKIP_REASON

    if not (comfy_dir / "comfy" / "multigpu.py").is_file():
        pytest.skip(f"{SKIP_REASON}: {comfy_dir}")
    with ComfyServer(comfy_dir=comfy_dir, base_dir=comfy_base, python=sys.executable,
                     log_path=comfy_base / "server_two_devices.log", env={FAKE_DEVICES_ENV: "2"}) as server:
        yield server


@pytest.fixture(scope="session")
def ltxav(comfy, model_names):
    """The tiny LTX-2 (audio + video) model through UNETLoader; skips where ComfyUI has no LTX-2."""
    from ltx_tdp_devkit.tiny_models import has_ltxav

    if not has_ltxav():
        pytest.skip(f"ComfyUI {comfy.comfyui_version()} has no LTX-2 (comfy.ldm.lightricks.av_model); "
                    "point COMFYUI_DIR at a current ComfyUI")
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltxav"], weight_dtype="default")
    return model


@pytest.fixture(scope="session")
def ltx25(comfy, model_names):
    """The tiny LTX-2.5 transformer (marker on) through UNETLoader; skips where ComfyUI has no LTX-2.5 (< 0.32).

    Mark the tests that use it `ltx25`: on ComfyUI 0.32+ with LTX_TDP_REQUIRE_LTX2=1 their skip is a failure."""
    from ltx_tdp_devkit.tiny_models import LTX25_SKIP_REASON, has_ltx25

    if not has_ltx25():
        pytest.skip(f"{LTX25_SKIP_REASON}; this is ComfyUI {comfy.comfyui_version()}")
    (model,) = comfy.run_node("UNETLoader", unet_name=model_names["ltx25"], weight_dtype="default")
    return model


@pytest.fixture(scope="session")
def vae(comfy, model_names):
    """The tiny real LTX VAE (ComfyUI's own VideoVAE), loaded by comfy.sd.VAE from its file's metadata."""
    import comfy.sd
    import comfy.utils
    import folder_paths

    sd, meta = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", model_names["vae"]),
                                           return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=meta)


@pytest.fixture(scope="session")
def noisy_vae(comfy):
    """The tiny VAE with timestep conditioning: its decode adds noise (randn * s + (1 - s) * latent)."""
    import comfy.sd
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    from ltx_tdp_devkit import tiny_models

    config = {**tiny_models.VAE_CONFIG, "timestep_conditioning": True}
    gen = torch.Generator().manual_seed(7)
    sd = {k: (torch.randn(v.shape, generator=gen) * 0.1).to(v.dtype) if v.is_floating_point() else v
          for k, v in VideoVAE(config=config).state_dict().items()}
    for key in sd:
        if key.endswith("std-of-means"):
            sd[key] = torch.ones_like(sd[key])
        elif key.endswith("mean-of-means"):
            sd[key] = torch.zeros_like(sd[key])
    return comfy.sd.VAE(sd=sd, metadata={"config": json.dumps({"vae": config})})
