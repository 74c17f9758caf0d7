"""A worker starts each collective only when rank 0 is about to run it, so a slow rank 0 never runs out a
worker's timer: the weights arrive one broadcast at a time (NCCL times an operation from when it is queued,
and a synchronous NCCL call returns as soon as it is queued), a model call's all_reduce is entered once
rank 0 has finished its own tiles, however much longer than the timeout its extra tile takes, and a decoded
tile is sent once rank 0 receives it, however long rank 0's own tile before it takes.

The first test mocks NCCL (no GPU here): `torch.distributed.broadcast` is replaced by a queue that, like
NCCL's, returns at once and completes an operation only when it is waited for; it counts how many
operations a worker has queued at a time. The second runs a real 2-rank gloo group, whose operations are
timed from when they start (the same defect shows there).
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from ltx_tdp_devkit.fault_probes import fault_latent, on_rank0_tile
from ltx_tdp_devkit.ltx_helpers import call_model, load_vae, randn, tdp_2x2
from ltx_tdp_devkit.vae_helpers import tiled

pytestmark = pytest.mark.distributed


class _QueuedBroadcasts:
    """NCCL-like broadcasts: a call queues the operation and returns; `wait` completes it (rank 0 has sent)."""

    def __init__(self, sent: list[torch.Tensor]):
        self.sent, self.pending, self.most_pending = sent, 0, 0

    def __call__(self, buffer: torch.Tensor, src: int = 0, async_op: bool = False):
        assert src == 0
        buffer.copy_(self.sent.pop(0))  # the bytes are there for whatever the stream runs next
        self.pending += 1
        self.most_pending = max(self.most_pending, self.pending)
        queue = self

        class Work:
            def wait(self, timeout=None):
                queue.pending -= 1
                return True

        return Work() if async_op else None  # synchronous under NCCL: returns with the operation still queued


class _Recipe:
    def __init__(self, make):
        self.make = make

    def build(self, device):
        from ltx_tdp.multigpu.api import Replica

        module = self.make().to("meta")
        return Replica(module, module, device)


def test_a_worker_queues_one_weight_broadcast_at_a_time(comfy, monkeypatch):
    from ltx_tdp.multigpu import wire as W
    from ltx_tdp.multigpu.replica import send_weights
    from ltx_tdp.multigpu.worker import Worker

    make = lambda: torch.nn.Sequential(*(torch.nn.Linear(6, 6) for _ in range(5)))  # noqa: E731
    torch.manual_seed(0)
    source = make()
    names = tuple((k, t.dtype, tuple(t.shape)) for k, t in source.state_dict().items())
    sent: list[torch.Tensor] = []
    send_weights(iter(source.state_dict().items()), names, lambda b: sent.append(b.clone()))
    nccl = _QueuedBroadcasts(sent)
    monkeypatch.setattr(dist, "broadcast", nccl)
    worker = Worker.__new__(Worker)
    worker.rank, worker.replicas = 1, {}
    worker.device = worker.comm_device = torch.device("cpu")
    worker._load_replica(W.ReplicaMessage(1, "model", "k", _Recipe(make), names))
    assert nccl.most_pending == 1, \
        f"the worker had {nccl.most_pending} of {len(names)} weight broadcasts queued at once (NCCL times each from then)"
    held = worker.replicas["model"][1].module.state_dict()
    assert all(torch.equal(held[k], t) for k, t in source.state_dict().items()), "the weights did not arrive"


def test_a_worker_waits_for_rank_0s_extra_tile_however_long_before_the_all_reduce(ltxv, group_factory):
    """2 x 2 tiles on 2 ranks: rank 0's first tile takes longer than the group timeout. The worker is done
    with its tiles long before; it must not sit in the all_reduce (where its timer runs) meanwhile."""
    timeout_s = 5.0
    group = group_factory(2, timeout_s=timeout_s)
    x = fault_latent()["samples"]
    want = call_model(tdp_2x2(ltxv), x, 0.6)
    session = group.session()
    slow = on_rank0_tile(tdp_2x2(ltxv, group), 1, lambda: time.sleep(timeout_s + 3))
    got = call_model(slow, x, 0.6)
    err = (got - want).abs().max().item()
    assert err <= 1e-6, f"the group's call differs from single-process by {err:.3e}"
    assert group.session() is session and session.stats["timeouts"] == 0, \
        f"the group did not survive rank 0's slow tile ({session.stats['timeouts']} timeouts)"
    group.shutdown()


def test_a_worker_sends_its_decoded_tile_only_when_rank_0_receives_it_however_long_rank_0s_tile_takes(
        comfy, model_names, group_factory):
    """2 x 2 x 2 decode tiles on 2 ranks: after its first tile rank 0 takes longer than the group timeout. The
    worker has decoded its first tile long before; it must not queue (NCCL) or start (gloo) its send meanwhile,
    where the operation's timer runs out."""
    timeout_s = 5.0
    vae = load_vae(model_names)
    x = randn(1, 128, 4, 4, 4, seed=1)
    settings = dict(spatial_tile=96, spatial_overlap=32, temporal_tile=24, temporal_overlap=8, context=1)
    want = tiled(vae, x, **settings)
    group = group_factory(2, timeout_s=timeout_s)
    tiled(vae, x, group=group, **settings)  # the worker gets the VAE first
    session = group.session()
    slow: list[int] = []

    def after_rank0_tile(done: int, total: int) -> None:
        if not slow:
            slow.append(done)
            time.sleep(timeout_s + 3)

    got = tiled(vae, x, group=group, progress=after_rank0_tile, **settings)
    err = (got - want).abs().max().item()
    assert err <= 1e-6, f"the group's decode differs from single-process by {err:.3e}"
    assert slow and group.session() is session and session.stats["timeouts"] == 0, \
        f"the group did not survive rank 0's slow tile ({session.stats['timeouts']} timeouts)"
    group.shutdown()
