"""The VAE path: a tiled decode (settings, inputs, block, decode loop: `decode_tiled`), the decoders' reach and
quality presets, and the decode as a worker rank runs it (job)."""

from ..errors import VaeDecodeError
from .decode import decode_tiled, image_batch
from .settings import DecodeSettings

__all__ = ["DecodeSettings", "VaeDecodeError", "decode_tiled", "image_batch"]
