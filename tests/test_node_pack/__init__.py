"""Test-only ComfyUI nodes (never shipped): what the tests need but the runtime lacks.

Real LTX text encoders are many GB, so `TDPTestRandomConditioning` emits seeded random conditioning with
an attention mask; ComfyUI 0.3.x's VAELoader ignores safetensors metadata, so `TDPTestVAELoader` builds
the VAE from its metadata config with ComfyUI's own `comfy.sd.VAE`. `TDPTestTileProbe` records what each
model call of a MODEL receives (placed after the TDP patcher: each tile call), for tests that run over a server.
`TDPTestFailOnDevice` makes the model calls on ComfyUI's MultiGPU clones fail, `TDPTestFailVAEOnDevice` another
device's tiles of the tiled decode; with LTX_TDP_TEST_FAKE_DEVICES=n
set, the pack fakes n CPU devices (a hardware mock, ltx_tdp_devkit.core_multigpu).
"""

from __future__ import annotations

import torch


class TDPTestRandomConditioning:
    CATEGORY = "LTX/TDP/testing"
    FUNCTION = "make"
    RETURN_TYPES = ("CONDITIONING",)

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1, "tooltip": "Seed of the random tokens."}),
            "tokens": ("INT", {"default": 8, "min": 1, "max": 1024, "tooltip": "Number of text tokens."}),
            "dim": ("INT", {"default": 16, "min": 1, "max": 8192, "tooltip": "Width of each token."}),
        }}

    def make(self, seed: int, tokens: int, dim: int):
        gen = torch.Generator().manual_seed(seed)
        cond = torch.randn(1, tokens, dim, generator=gen)
        return ([[cond, {"attention_mask": torch.ones(1, tokens, dtype=torch.long)}]],)


class TDPTestVAELoader:
    CATEGORY = "LTX/TDP/testing"
    FUNCTION = "load"
    RETURN_TYPES = ("VAE",)

    @classmethod
    def INPUT_TYPES(cls):
        import folder_paths

        return {"required": {"vae_name": (folder_paths.get_filename_list("vae"), {"tooltip": "A VAE file."})}}

    def load(self, vae_name: str):
        import comfy.sd
        import comfy.utils
        import folder_paths

        sd, metadata = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", vae_name),
                                                   return_metadata=True)
        return (comfy.sd.VAE(sd=sd, metadata=metadata),)


class TDPTestTileProbe:
    """MODEL -> the same MODEL whose every model call (inside TDP's wrapper: every tile call) appends one JSON line
    to `filename` in the output folder: the video latent's shape, the guide tokens, how many of them the model
    keeps (denoise mask not negative) and each guide attention entry's latent_shape and pre_filter_count."""

    CATEGORY = "LTX/TDP/testing"
    FUNCTION = "probe"
    RETURN_TYPES = ("MODEL",)

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "The model to watch (e.g. the TDP patcher's output)."}),
            "filename": ("STRING", {"default": "tile_probe.jsonl", "tooltip": "JSON lines file in the output folder."}),
        }}

    def probe(self, model, filename: str):
        import json
        import os

        import comfy.patcher_extension as ext
        import folder_paths

        path = os.path.join(folder_paths.get_output_directory(), filename)

        def wrapper(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kw):
            shapes = kw.get("latent_shapes")
            video = list(shapes[0]) if shapes else list(x.shape)
            keyframes, mask = kw.get("keyframe_idxs"), kw.get("denoise_mask")
            guides = 0 if keyframes is None else int(keyframes.shape[2])
            frames = guides // (video[-2] * video[-1])
            kept = guides if mask is None or not frames else int((mask[0, :, -frames:] >= 0).all(0).expand(
                frames, video[-2], video[-1]).sum())
            entries = [[list(e["latent_shape"]), int(e["pre_filter_count"])]
                       for e in kw.get("guide_attention_entries") or []]
            with open(path, "a") as out:
                out.write(json.dumps({"video": video, "guide_tokens": guides, "kept_guide_tokens": kept,
                                      "entries": entries}) + "\n")
            return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kw)

        probed = model.clone()
        probed.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_tile_probe", wrapper)
        return (probed,)


class TDPTestFailOnDevice:
    """MODEL -> the same MODEL whose model calls raise on every device but the one it was given on: a fault on one
    of ComfyUI's MultiGPU clones (an APPLY_MODEL wrapper inside TDP's, so it runs per tile on each device)."""

    CATEGORY = "LTX/TDP/testing"
    FUNCTION = "fail"
    RETURN_TYPES = ("MODEL",)

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL", {"tooltip": "The model (after MultiGPU CFG Split)."})}}

    def fail(self, model):
        import comfy.patcher_extension as ext

        own = model.model

        def wrapper(executor, *args, **kwargs):
            if executor.class_obj is not own:
                raise RuntimeError("simulated fault on a MultiGPU clone")
            return executor(*args, **kwargs)

        failing = model.clone()
        failing.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, "tdp_test_fail_on_device", wrapper)
        return (failing,)


class TDPTestFailVAEOnDevice:
    """VAE -> the same VAE; at the next forward of an LTX decoder in a thread of ComfyUI's MultiGPUThreadPool (another
    device's tiles of the tiled decode) it raises (`fault`) or the user presses Cancel (`cancel`), once (torch's
    global forward pre-hook, removed as it fires)."""

    CATEGORY = "LTX/TDP/testing"
    FUNCTION = "fail"
    RETURN_TYPES = ("VAE",)

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"vae": ("VAE", {"tooltip": "The VAE the tiled decode spreads over the devices."}),
                             "action": (["fault", "cancel"], {"tooltip": "Raise, or press Cancel."})}}

    def fail(self, vae, action: str = "fault"):
        import threading

        import comfy.model_management as mm

        handle = None

        def hook(module, _args):
            target = getattr(threading.current_thread(), "_target", None)
            if type(module).__name__ == "Decoder" and getattr(target, "__name__", "") == "_worker_loop":
                handle.remove()
                if action == "cancel":
                    mm.interrupt_current_processing(True)
                    return
                raise RuntimeError("simulated fault on a decode device")

        handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        return (vae,)


def _fake_devices_from_env() -> None:
    """HARDWARE MOCK of the multi-device server tests: with LTX_TDP_TEST_FAKE_DEVICES=n this CPU server reports n
    torch devices (ltx_tdp_devkit.core_multigpu)."""
    import os

    n = int(os.environ.get("LTX_TDP_TEST_FAKE_DEVICES", "0") or 0)
    if n > 1:
        from ltx_tdp_devkit.core_multigpu import install_fake_devices

        install_fake_devices(n)


_fake_devices_from_env()

NODE_CLASS_MAPPINGS = {
    "TDPTestRandomConditioning": TDPTestRandomConditioning,
    "TDPTestVAELoader": TDPTestVAELoader,
    "TDPTestTileProbe": TDPTestTileProbe,
    "TDPTestFailOnDevice": TDPTestFailOnDevice,
    "TDPTestFailVAEOnDevice": TDPTestFailVAEOnDevice,
}
