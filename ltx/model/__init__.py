"""The model path: one LTX / LTX-2 model call cut into tile calls (call, guides, positions, audio), the
wrappers on a clone that do it at every call (patch: `apply_tdp`), and the call as a worker rank runs it (job)."""

from .patch import apply_tdp

__all__ = ["apply_tdp"]
