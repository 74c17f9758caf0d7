"""Test-only ComfyUI nodes (never shipped): what the tests need but the runtime lacks.

Real LTX text encoders are many GB, so `TDPTestRandomConditioning` emits seeded random conditioning with
an attention mask; ComfyUI 0.3.x's VAELoader ignores safetensors metadata, so `TDPTestVAELoader` builds
the VAE from its metadata config with ComfyUI's own `comfy.sd.VAE`.
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


NODE_CLASS_MAPPINGS = {
    "TDPTestRandomConditioning": TDPTestRandomConditioning,
    "TDPTestVAELoader": TDPTestVAELoader,
}
