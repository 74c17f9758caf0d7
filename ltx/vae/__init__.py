"""The VAE path: a tiled decode (settings, inputs, the decode loop `decode_tiled`), its two decoders behind one
interface (decoder: conv, diffusion; their reach), and the decode as a worker rank runs it (job)."""

from ..errors import VaeDecodeError
from .decode import decode_tiled, image_batch
from .settings import DecodeSettings

__all__ = ["DecodeSettings", "VaeDecodeError", "decode_tiled", "image_batch"]
