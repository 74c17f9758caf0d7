"""The multi-GPU launcher node: settings in, a TDP_GROUP out (workers start here, reused across prompts)."""

from __future__ import annotations

from comfy_api.latest import io

from ..multigpu.group import get_group
from ..multigpu.settings import BACKENDS, resolve_settings
from .types import CATEGORY, TDP_GROUP


class MultiGPULauncherNode(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="LTXTDPMultiGPULauncher",
            display_name="LTX TDP Multi-GPU Launcher",
            category=CATEGORY,
            description="Starts torch.distributed worker ranks (this ComfyUI is rank 0) that share the TDP tiles "
            "round-robin; every model call ends with one all_reduce. Each rank holds a full copy of the model, "
            "sent from here with its LoRAs and patches. Workers are reused while these settings stay the same. "
            "torch.distributed trusts its peers: use it on a trusted network only.",
            inputs=[
                io.Int.Input("ranks", default=2, min=1, max=64,
                             tooltip="Number of ranks, this ComfyUI included (rank 0). Ignored when a device "
                             "list is given."),
                io.String.Input("devices", default="",
                                tooltip="Optional device per rank, comma separated, by machine GPU number (as "
                                "nvidia-smi and ComfyUI's --cuda-device number them), e.g. 'cuda:0,cuda:1'. Rank 0 "
                                "always runs on ComfyUI's own GPU (cuda:3 when started with --cuda-device 3); each "
                                "worker sees only its own GPU. Empty: the GPUs after ComfyUI's, one per rank, or "
                                "the CPU."),
                io.Combo.Input("backend", options=list(BACKENDS), default="auto",
                               tooltip="torch.distributed backend. auto: NCCL when every rank has its own CUDA GPU, "
                               "else gloo."),
                io.Int.Input("timeout_s", default=120, min=5, max=3600,
                             tooltip="Seconds to wait for a worker to answer during a model call (and, at least "
                             "60 s, for workers to start). A worker that dies or stays silent longer fails the prompt with its "
                             "rank named; the next prompt starts fresh workers."),
                io.String.Input("address", default="127.0.0.1",
                                tooltip="Address the group listens on (and only on). Keep 127.0.0.1 for one "
                                "machine; for workers on other hosts use this host's address on a trusted network."),
                io.Int.Input("port", default=0, min=0, max=65535,
                             tooltip="Rendezvous port. 0 picks a free port (local workers only)."),
                io.Boolean.Input("external_workers", default=False,
                                 tooltip="Do not start workers here: wait (up to timeout_s) for workers started by "
                                 "hand with multigpu/worker_main.py, e.g. on other hosts. Needs a fixed port."),
            ],
            outputs=[TDP_GROUP.Output(display_name="tdp_group",
                                      tooltip="Connect to the TDP Model Patcher (and the tiled VAE decode).")],
        )

    @classmethod
    def execute(cls, ranks: int, devices: str, backend: str, timeout_s: int, address: str, port: int,
                external_workers: bool = False) -> io.NodeOutput:
        import comfy.model_management

        settings = resolve_settings(ranks, devices, backend, timeout_s, address, port, external_workers,
                                    local_device=str(comfy.model_management.get_torch_device()))
        group = get_group(settings)
        group.session()  # start now, so that a group that cannot start fails here with its reason
        return io.NodeOutput(group)
