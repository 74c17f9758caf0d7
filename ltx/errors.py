"""What the LTX layer refuses that is not a tile layout (a layout is `tiling.TilingError`'s).

ComfyUI shows a failed node's error as its class name and message, so both read as a sentence for a user:
what is wrong, and what to connect or set instead.
"""


class UnsupportedInput(ValueError):
    """An input the pack cannot take: a MODEL that is not LTX, an unknown audio mode, ControlNet inputs for worker
    ranks, or (`VaeDecodeError`) what the tiled decode refuses. The message is written for a ComfyUI user."""


class VaeDecodeError(UnsupportedInput):
    """A latent, VAE or setting the tiled decode cannot take. The message is written for a ComfyUI user."""
