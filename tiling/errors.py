"""The one error type for every refused tile layout."""


class TilingError(ValueError):
    """A tile layout that cannot be blended exactly. The message is written for a ComfyUI user."""
