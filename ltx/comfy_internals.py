"""Every ComfyUI internal the pack relies on beyond its public hooks: the name, where the pack uses it, what it
assumes, and the node that needs it. ComfyUI renames such things between releases; a renamed one must never make
the pack run silently with a cut skipped.

Each `Internal` is checked statically (`problem`: the module, the object, its members, slots and parameters), at
load (`load_report`: one log line per changed internal, naming the ComfyUI version and the nodes it stops) and at
a node's first use (`require`: the node refuses with that line). What only a run can show (the keys a block
replace receives, the attention override's call, the estimate's keywords) is pinned by tests on the real ComfyUI,
which read the expected values here (`BLOCK_KEYS`, `OVERRIDE_CALL`).

An internal whose module (or `only_with` feature) is absent altogether belongs to a ComfyUI older than the feature
(MultiGPU and LTX-2 came in 0.24, the streaming conv decoder in 0.8): the pack already runs without it and says so
where it matters, so that is not a problem; an object renamed or changed inside a module that is there is.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PATCHER = "LTX TDP Model Patcher"
SEQUENCE = "LTX Sequence Parallel"
DECODE = "LTX TDP Tiled VAE Decode"
TILES_ON_DEVICES = "LTX TDP Model Patcher's tiles over MultiGPU CFG Split"
DECODE_ON_DEVICES = "LTX TDP Tiled VAE Decode on several devices"
GGUF_ON_DEVICES = "a GGUF model over MultiGPU CFG Split"
"""The uses an internal can stop (`Internal.needed_by`): a node, or one way of running it. `require(use)` is
called where that use starts, so a change that stops only MultiGPU never stops one GPU."""

MULTIGPU = "comfy.multigpu"
"""ComfyUI's in-process MultiGPU (0.24+)."""
LTX2 = "comfy.ldm.lightricks.av_model"
"""LTX-2 and LTX-2.5 (0.24+ here)."""
CHUNKED_IO = "comfy.ldm.lightricks.vae.causal_video_autoencoder.VideoVAE.comfy_has_chunked_io"
"""LTX's conv decoder streaming time into an output buffer (0.8+)."""


@dataclass(frozen=True)
class Internal:
    """One ComfyUI object the pack relies on. `members`: attributes (methods, constants) the object must have;
    `needed_by`: the uses it can stop (the constants above); `slots`: its `__slots__`, which the pack fills
    itself; `parameters`: parameters `call` (the object, or its member of that name) must take; `only_with`: see
    there."""

    module: str
    name: str
    used_in: str
    assumes: str
    needed_by: tuple[str, ...]
    members: tuple[str, ...] = ()
    slots: tuple[str, ...] = ()
    call: str = ""
    parameters: tuple[str, ...] = ()
    only_with: str = ""
    """A dotted name: where this ComfyUI lacks it (an older one, without the feature), the pack does not meet
    this internal, so its absence is no problem."""

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


INTERNALS: tuple[Internal, ...] = (
    Internal("comfy.patcher_extension", "WrappersMP", "ltx/model/patch.py, ltx/sequence/patch.py, ltx/model/memory.py",
             "the wrapper kinds the pack adds on its clone exist under these names",
             (PATCHER, SEQUENCE),
             members=("APPLY_MODEL", "OUTER_SAMPLE", "CALC_COND_BATCH", "PREPARE_SAMPLING", "DIFFUSION_MODEL")),
    Internal("comfy.model_base", "BaseModel", "ltx/model/memory.py (TileMemory, an object patch of memory_required)",
             "the estimate is asked as memory_required(input_shape, cond_shapes=...); keywords a newer ComfyUI adds "
             "are forwarded", (PATCHER,), call="memory_required", parameters=("input_shape",)),
    Internal("comfy.ldm.lightricks.symmetric_patchifier", "SymmetricPatchifier",
             "ltx/model/positions.py (ShiftedGridPatchifier, an object patch of diffusion_model.patchifier)",
             "LTX computes token positions from patchify(latents) -> (tokens, latent coordinates)", (PATCHER,),
             members=("patchify",)),
    Internal("comfy.ldm.modules.attention", "wrap_attn", "ltx/sequence/attention.py (GatherAttention)",
             "an override in transformer_options['optimized_attention_override'] is called as override(func, q, k, "
             "v, heads, *args, **kwargs) with plain tensors (containers unwrapped when it has no container_function)",
             (SEQUENCE,)),
    Internal("comfy.ldm.lightricks.av_model", "CompressedTimestep", "ltx/sequence/shards.py (slice_tokens)",
             "LTX-2's per-frame timestep modulation: the pack builds a shard's rows with these slots and overrides "
             "expand / expand_for_computation", (SEQUENCE,),
             members=("expand", "expand_for_computation"),
             slots=("data", "batch_size", "num_frames", "patches_per_frame", "feature_dim"),
             call="expand_for_computation", parameters=("scale_shift_table", "batch_size", "indices")),
    Internal("comfy.ldm.lightricks.model", "GuideAttentionMask", "ltx/sequence/shards.py (shard_guide_mask)",
             "LTX-2.5's guide self-attention mask: the pack builds a shard's mask with these slots", (SEQUENCE,),
             slots=("guide_start", "tracked_count", "noisy_mask", "tracked_mask"), only_with=LTX2),
    Internal("comfy.multigpu", "MultiGPUThreadPool", "ltx/device_ranks.py, ltx/vae/devices.py",
             "one worker thread per device: MultiGPUThreadPool(devices), submit(device, fn, *args), "
             "get_result(device) -> (result, error), devices, shutdown()",
             (TILES_ON_DEVICES, SEQUENCE, DECODE_ON_DEVICES),
             members=("submit", "get_result", "devices", "shutdown"), call="submit", parameters=("device", "fn")),
    Internal("comfy.model_patcher", "ModelPatcher", "ltx/loader_factory.py (ensure_loader_factory)",
             "MultiGPU copies a model with deepclone_multigpu from the loader's cached_patcher_init factory",
             (GGUF_ON_DEVICES,), members=("deepclone_multigpu",), only_with=MULTIGPU),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "VideoVAE", "ltx/vae/conv.py (ConvDecode)",
             "a decoder that streams time (comfy_has_chunked_io) writes into decode(x, output_buffer=...) of "
             "decode_output_shape(x.shape)", (DECODE,), members=("decode_output_shape", "decode"), call="decode",
             parameters=("x", "output_buffer"), only_with=CHUNKED_IO),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "get_max_chunk_size",
             "ltx/vae/memory.py (conv_chunk_bytes)",
             "the conv decoder streams time in chunks of get_max_chunk_size(device) frames, from MIN_CHUNK_SIZE up to "
             "MIN_VRAM_FOR_CHUNK_SCALING to MAX_CHUNK_SIZE from MAX_VRAM_FOR_CHUNK_SCALING", (DECODE,),
             parameters=("device",), only_with=CHUNKED_IO),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "MIN_CHUNK_SIZE", "ltx/vae/memory.py",
             "see get_max_chunk_size", (DECODE,), only_with=CHUNKED_IO),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "MAX_CHUNK_SIZE", "ltx/vae/memory.py",
             "see get_max_chunk_size", (DECODE,), only_with=CHUNKED_IO),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "MIN_VRAM_FOR_CHUNK_SCALING", "ltx/vae/memory.py",
             "see get_max_chunk_size", (DECODE,), only_with=CHUNKED_IO),
    Internal("comfy.ldm.lightricks.vae.causal_video_autoencoder", "MAX_VRAM_FOR_CHUNK_SCALING", "ltx/vae/memory.py",
             "see get_max_chunk_size", (DECODE,), only_with=CHUNKED_IO),
)

BLOCK_KEYS: dict[str, frozenset[str]] = {
    "LTXVModel": frozenset({"img", "txt", "vec", "pe", "attention_mask", "self_attention_mask", "prompt_timestep",
                            "transformer_options"}),
    "LTXAVModel": frozenset({"img", "v_context", "a_context", "attention_mask", "v_timestep", "a_timestep", "v_pe",
                             "a_pe", "v_cross_pe", "a_cross_pe", "v_cross_scale_shift_timestep",
                             "a_cross_scale_shift_timestep", "v_cross_gate_timestep", "a_cross_gate_timestep",
                             "transformer_options", "self_attention_mask", "a_prompt_timestep",
                             "v_prompt_timestep"}),
}
"""Every key LTX's ("double_block", i) replace is known to receive (ComfyUI 0.24 to 0.33), by diffusion model
class. ltx/sequence/blocks.py cuts `img`'s video, its VIDEO_ROWS and `self_attention_mask` to a shard's rows and
passes the rest whole (text contexts, audio, the per-prompt `prompt_timestep` modulation of the text's keys).
A key outside this set is one nobody decided whether to cut: tests/ltx/test_comfy_internals.py fails on it."""

BLOCK_KEYS_CUT: dict[str, frozenset[str]] = {
    "LTXVModel": frozenset({"img", "vec", "pe"}),
    "LTXAVModel": frozenset({"img", "v_timestep", "v_pe"}),
}
"""The keys the block replace must receive for the pack to cut a shard at all; one renamed fails the same test."""

OVERRIDE_CALL = ("func", "q", "k", "v", "heads")
"""How `wrap_attn` calls an attention override: the attention it would have run, then q, k, v (plain tensors) and
heads, positionally; the rest as keywords."""


def _present(dotted: str) -> bool:
    """Whether the module / attribute path `dotted` exists in this ComfyUI."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _resolve(internal: Internal) -> tuple[Any, str | None]:
    """(the object, None), or (None, why not): "absent" where its module, or its `only_with`, is not there."""
    if internal.only_with and not _present(internal.only_with):
        return None, "absent"
    try:
        module = importlib.import_module(internal.module)
    except Exception as e:  # noqa: BLE001  (any failure to import is the problem to report, not a crash at load)
        if isinstance(e, ModuleNotFoundError) and e.name and internal.module.startswith(e.name):
            return None, "absent"
        return None, f"{internal.module} does not import: {type(e).__name__}: {e}"
    if not hasattr(module, internal.name):
        return None, f"{internal.module} has no {internal.name}"
    return getattr(module, internal.name), None


def problem_with(internal: Internal, obj: Any) -> str | None:
    """What `obj` (the internal as this ComfyUI has it) lacks of what the pack assumes, or None. Invariant: None
    exactly when every member, slot and parameter named by `internal` is there."""
    missing = [m for m in internal.members if not hasattr(obj, m)]
    if missing:
        return f"{internal.qualified} has no {', '.join(missing)}"
    slots = tuple(getattr(obj, "__slots__", ()))
    if internal.slots and set(internal.slots) - set(slots):
        return f"{internal.qualified}'s slots are {slots}, not {internal.slots}"
    if internal.parameters:
        target = getattr(obj, internal.call, None) if internal.call else obj
        if target is None:
            return f"{internal.qualified} has no {internal.call}"
        try:
            names = set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            return None
        lost = [p for p in internal.parameters if p not in names]
        if lost:
            return f"{internal.qualified}{'.' + internal.call if internal.call else ''} takes no {', '.join(lost)}"
    return None


def problem(internal: Internal) -> str | None:
    """What is wrong with `internal` on this ComfyUI (renamed, moved or changed), or None where it is as the pack
    assumes or its whole module is absent (an older ComfyUI without the feature)."""
    obj, why = _resolve(internal)
    if why == "absent":
        return None
    if why is not None:
        return why
    return problem_with(internal, obj)


def comfyui_version() -> str:
    """This ComfyUI's version (its `comfyui_version` module), or "(unknown version)"."""
    try:
        import comfyui_version as version

        return str(version.__version__)
    except ImportError:
        return "(unknown version)"


@functools.cache
def problems() -> tuple[tuple[Internal, str], ...]:
    """Every internal with a problem on this ComfyUI, with it (checked once per process)."""
    return tuple((i, p) for i in INTERNALS if (p := problem(i)) is not None)


def message(internal: Internal, why: str) -> str:
    """The one line a user reads: the ComfyUI version, what changed, the nodes it stops, what to do."""
    return (f"ComfyUI {comfyui_version()}: {why} (the pack relies on it in {internal.used_in}: {internal.assumes}); "
            f"{', '.join(internal.needed_by)} cannot run on this ComfyUI. Update the LTX TDP pack, or use the "
            "ComfyUI it was tested on (README).")


def load_report() -> list[str]:
    """Log, once at load, one warning line per changed internal; returns the lines."""
    lines = [message(i, p) for i, p in problems()]
    for line in lines:
        log.warning("LTX TDP: %s", line)
    return lines


def require(use: str) -> None:
    """Raise UnsupportedInput with the first changed internal `use` needs (called before it patches or runs
    anything). Invariant: raises exactly when `problems()` has an internal whose `needed_by` names `use`."""
    from .errors import UnsupportedInput

    for internal, why in problems():
        if use in internal.needed_by:
            raise UnsupportedInput(message(internal, why))
