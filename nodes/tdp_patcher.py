"""The TDP model patcher node: MODEL + tile config -> MODEL whose every call runs per latent tile."""

from __future__ import annotations

from comfy_api.latest import io

from ..ltx.model import apply_tdp
from ..ltx.model.audio import AUDIO_HELD, AUDIO_MODES, LEGACY_AUDIO_MODES
from .types import CATEGORY, TDP_GROUP, TILING


class TDPModelPatcherNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPModelPatcher",
            display_name="LTX TDP Model Patcher",
            category=CATEGORY,
            description="Tiled Data Parallelism for LTX-Video and LTX-2: every model call runs on overlapping "
            "latent tiles (positions renormalised per tile) and the predictions are blended with windows "
            "that sum to exactly one. Use it for an upscale stage with a low first sigma (e.g. 0.625, 0.4, 0); "
            "from pure noise, tiles drift apart.",
            inputs=[
                io.Model.Input("model", tooltip="An LTX-Video or LTX-2 model."),
                TILING.Input("tiling", tooltip="Tile counts and overlaps (LTX TDP Tile Config, or its balanced or "
                             "tile size variant). Checked against the actual latent when sampling starts."),
                io.Boolean.Input("normalize_positions", default=True,
                                 tooltip="Give every tile positions that start at zero, as upstream LTX-2 TDP does "
                                 "(recommended). For spatial tiles the result is the same either way within 2e-5 (LTX's "
                                 "rotary positions depend on position differences within a tile). Off: tiles keep "
                                 "their positions in the full frame."),
                io.Combo.Input("audio_mode", options=list(AUDIO_MODES), default=AUDIO_HELD,
                               tooltip="LTX-2 audio is not tiled. held (recommended): for the whole stage the "
                               "stage-1 audio is clean conditioning (its timestep is 0, every tile sees it) and it "
                               "leaves this stage exactly as it entered, through output and denoised_output. "
                               "Needs audio from an earlier stage: patch the upscale stage only. average: every "
                               "tile pass predicts audio and the predictions are averaged (upstream LTX-2's "
                               "behaviour, for comparison; not a meaningful audio result). Workflows saved with "
                               "'frozen (...)' load as held."),
                TDP_GROUP.Input("tdp_group", optional=True,
                                tooltip="Optional: a multi-GPU group from LTX TDP Multi-GPU Launcher. Its ranks "
                                "share the tiles round-robin. Without it, tiles run one after another here."),
            ],
            outputs=[io.Model.Output(tooltip="The same model, denoising per tile.")],
        )

    @classmethod
    def validate_inputs(cls, audio_mode: str = AUDIO_HELD) -> bool | str:
        # Taking over audio_mode's check lets workflows saved with earlier labels ("frozen (...)") load.
        if audio_mode in AUDIO_MODES or audio_mode in LEGACY_AUDIO_MODES:
            return True
        return f"audio_mode must be one of {', '.join(AUDIO_MODES)}; got {audio_mode!r}"

    @classmethod
    def execute(cls, model, tiling, normalize_positions: bool = True, audio_mode: str = AUDIO_HELD,
                tdp_group=None) -> io.NodeOutput:
        return io.NodeOutput(apply_tdp(model, tiling, group=tdp_group, normalize_positions=normalize_positions,
                                       audio_mode=audio_mode))
