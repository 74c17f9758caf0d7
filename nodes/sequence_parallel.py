"""The LTX Sequence Parallel node: MODEL -> MODEL whose stage-1 model calls run over ComfyUI's MultiGPU devices."""

from __future__ import annotations

from comfy_api.latest import io

from ..ltx.sequence import apply_sequence_parallel
from .types import CATEGORY


class SequenceParallelNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPSequenceParallel",
            display_name="LTX Sequence Parallel",
            category=CATEGORY,
            description="Exact sequence parallelism for stage 1 (LTX-Video, LTX-2, LTX-2.5): each model call's video "
            "tokens are cut into one shard per GPU of ComfyUI's MultiGPU CFG Split (balanced by MultiGPU Options' "
            "relative speeds); every GPU runs its shard, attention over video tokens sees all of them, and the "
            "result is one GPU's within fp32 rounding. Works at cfg 1 too. Without MultiGPU clones it changes "
            "nothing. Not together with the TDP patcher (that one is for stage 2).",
            inputs=[
                io.Model.Input("model", tooltip="An LTX-Video or LTX-2 model, with ComfyUI's MultiGPU CFG Split before "
                               "or after this node (one GPU per clone). Use it on the stage-1 (full video, low "
                               "resolution) model."),
            ],
            outputs=[io.Model.Output(tooltip="The same model, its video tokens shared by the MultiGPU devices.")],
        )

    @classmethod
    def execute(cls, model) -> io.NodeOutput:
        return io.NodeOutput(apply_sequence_parallel(model))
