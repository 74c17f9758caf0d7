"""What the GPU check measures: the real LTX-2 sizes, and the tiny sizes its CPU smoke run uses instead.

Real sizes (facts, with where they come from):

* Transformer: LTX-2 19B audio + video, ComfyUI's `LTXAVModel` at its class defaults, which are the
  published configuration: 48 layers, video 32 heads x 128 (4096 wide), audio 32 heads x 64 (2048 wide),
  caption_channels 3840, text connectors 30 heads x 128, 2 layers. ComfyUI detects a checkpoint as
  LTX-2 by the key `audio_adaln_single.linear.weight` and reads num_layers (48) from the block count and
  attention_head_dim (4096 // 32 = 128) and cross_attention_dim (4096) from `attn2.to_k`; the check runs
  that detection on the model's own (meta) state dict, so the model built is the one ComfyUI would build.
* Stage 2 at 4K: 3840 x 2176 x 121 frames -> video latent 16 x 68 x 120 (x8 time with a causal first
  frame, x32 space; 2160 rounded up to whole latent cells); audio latent 121 frames / 25 fps x 25 latents
  per second = 121 latents of 8 channels x 16 bins; text context 1024 tokens of 2 x 3840 (LTX-2's
  processed context, video and audio halves); first stage-2 sigma 0.625 (upstream LTX-2: 0.625, 0.4, 0).
* TDP layouts: 2 x 2 tiles with overlap 5 latent cells (1 and 4 GPUs; 2 GPUs run two tiles each) and
  2 x 4 (8 GPUs), as the example workflows use.
* LTX-2.5 transformer (ComfyUI >= 0.32): ComfyUI's `LTXAVModel` at its defaults (the LTX-2 sizes above)
  with the test kit's LTX-2.5 switches (`ltx_tdp_devkit.tiny_models.LTX25_SWITCHES`: causal temporal
  positions, gated attention, AdaLN on the cross-attention, the caption projection before the text
  connectors, bias-free feed-forwards) and the keyframe marker: 19.72 B parameters. ComfyUI takes the
  marker from the key `keyframes_abs_pos_embedding` and the rest from the checkpoint's `config` metadata;
  the published files (`ltx-2.5-22b-...`) and their metadata cannot be read here, so their "22B" is not
  reproduced (8 text-connector layers with gated attention would give 21.85 B: a guess, not used). Quantized as the templates' files are: every Linear
  of the transformer blocks in fp8 e4m3fn or int8-convrot (rotation groups of 256, ComfyUI's default).
  Input: a stage-2 call on 4 x 16 x 24 latent cells (25 frames at 768 x 512 px: a correctness size, the
  4K figures are LTX-2's), 25 audio latents, 128 text tokens.
* VAE: the LTX-2 video VAE's configuration as LTX-2's checkpoints carry it in their metadata
  (`config.vae`, kept once in tests/ltx_tdp_devkit/real_vae.py): decoder base 128 channels, res blocks 4, 6, 4,
  2, 2 between a space-only, a time-only and two x2/x1 upsamplers, patch 4, pixel norm, not
  timestep-conditioned; decoded at the tiled decode node's default inputs (DecodeSettings()),
  resolved as the node resolves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

def ltx2_vae_config() -> dict:
    """The LTX-2 video VAE's config as its checkpoints carry it (the test kit's `ltx_tdp_devkit.real_vae`, one copy)."""
    from ltx_tdp_devkit.real_vae import LTX2_VAE_CONFIG

    return dict(LTX2_VAE_CONFIG)


def decode_settings(node_inputs: dict) -> object:
    """The tiled decode's settings for these node inputs; the node's defaults (DecodeSettings) for the rest."""
    from ltx_tdp.ltx.vae import DecodeSettings

    return DecodeSettings(**node_inputs)


def ltx25_config() -> dict:
    """LTX-2.5's published configuration as LTXAVModel overrides: its defaults + the test kit's LTX-2.5 switches
    (tiny_models.LTX25_SWITCHES) + the keyframe marker."""
    from ltx_tdp_devkit.ltx25_files import MARKER
    from ltx_tdp_devkit.tiny_models import LTX25_SWITCHES

    return {**LTX25_SWITCHES, **MARKER}


@dataclass(frozen=True)
class Layout:
    """A TDP tile layout: tiles along height and width, overlap in latent cells."""

    height: int
    width: int
    overlap: int

    @property
    def tiles(self) -> int:
        return self.height * self.width

    def label(self) -> str:
        return f"{self.height}x{self.width}"


@dataclass(frozen=True)
class Sizes:
    """Everything the real-size steps build and feed, at one scale (real or smoke)."""

    label: str
    transformer: dict = field(default_factory=dict)
    """LTXAVModel config overrides ({} = ComfyUI's defaults = LTX-2 19B)."""
    video_latent: tuple[int, int, int] = (16, 68, 120)
    """(frames, height, width) in latent cells."""
    vae_latent: tuple[int, int, int] = (16, 68, 120)
    """The latent the VAE steps decode (the same 4K clip at real size)."""
    audio_latents: int = 121
    text_tokens: int = 1024
    sigma: float = 0.625
    four: Layout = Layout(2, 2, 5)
    eight: Layout = Layout(2, 4, 5)
    vae_config: dict = field(default_factory=ltx2_vae_config)
    decode: dict = field(default_factory=dict)
    """The tiled decode node's inputs that differ from its defaults (DecodeSettings: tiles, overlaps, quality)."""
    warmup_latent: tuple[int, int, int] = (2, 8, 8)
    ltx25_transformer: dict = field(default_factory=ltx25_config)
    """LTXAVModel config of the LTX-2.5 steps (overrides on its defaults)."""
    ltx25_latent: tuple[int, int, int] = (4, 16, 24)
    ltx25_audio_latents: int = 25
    ltx25_text_tokens: int = 128
    convrot_group: int = 256
    """int8-convrot's rotation group (input features per Hadamard block)."""
    exchange: tuple[tuple[str, tuple[int, int, int]], ...] = (("1080p", (16, 17, 30)), ("4K", (16, 34, 60)))
    """Stage-1 latents (frames, height, width) whose per-layer K/V the exchange step copies (exchange.py)."""


REAL = Sizes(label="real (LTX-2 19B, 3840 x 2176 x 121)")


def smoke_sizes() -> Sizes:
    """Tiny sizes that run every real-size step on a CPU in seconds (same code path, same layouts)."""
    from ltx_tdp_devkit import tiny_models  # tests/ltx_tdp_devkit: the tiny models of the test suite

    vae = {**tiny_models.VAE_CONFIG, "timestep_conditioning": True}
    return Sizes(label="smoke (tiny models, CPU)", transformer=dict(tiny_models.LTXAV_CONFIG), video_latent=(3, 8, 12),
                 vae_latent=(2, 4, 6),
                 audio_latents=5, text_tokens=8, four=Layout(2, 2, 2), eight=Layout(2, 4, 2), vae_config=vae,
                 decode=dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8, quality="exact"),
                 warmup_latent=(2, 4, 4), ltx25_transformer=tiny_ltx25_config(), ltx25_latent=(3, 8, 12),
                 ltx25_audio_latents=5, ltx25_text_tokens=8, convrot_group=16,
                 exchange=(("smoke", (2, 4, 6)),))


def tiny_ltx25_config() -> dict:
    """The tiny LTX-2.5 transformer of the suite (the smoke run's LTX-2.5 model)."""
    from ltx_tdp_devkit.ltx25_files import tiny_ltx25_config as tiny

    return tiny()
