"""The TDP_GROUP value and the registry of groups (one per distinct settings).

A `TDPGroup` is a handle on settings; its live `Session` is started on demand and restarted after a
failure. At most one session is alive per process (torch.distributed has one default group): starting
another shuts the previous one down. Every session ends at interpreter exit (atexit).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..tiling import TilePlan
from ..tiling.ranks import ONE_RANK, AddTile, Partial, TileRanks
from .api import GatherJob, ReduceJob, ReplicaSource
from .settings import GroupSettings

log = logging.getLogger(__name__)

_lock = threading.RLock()
_groups: dict[GroupSettings, "TDPGroup"] = {}
_live: "TDPGroup | None" = None


class TDPGroup:
    """What the launcher node outputs and the patcher / tiled VAE decode take as `tdp_group`."""

    def __init__(self, settings: GroupSettings):
        self.settings = settings
        self._session: Any = None

    @property
    def rank_count(self) -> int:
        return self.settings.world_size

    @property
    def receives_on_device(self) -> bool:
        """Whether rank 0 receives the workers' tiles into a buffer on its GPU (NCCL moves device memory only)."""
        return self.settings.backend == "nccl"

    def __repr__(self) -> str:
        s = self.settings
        return f"TDPGroup({s.world_size} ranks: {', '.join(s.devices)}; {s.backend})"

    def session(self) -> Any:
        """The live session, started (or restarted after a failure) when needed."""
        global _live
        from .session import Session

        with _lock:
            if self._session is not None and not self._session.closed:
                return self._session
            if _live is not None and _live is not self:
                log.info("LTX TDP: shutting down the group %r to start %r", _live, self)
                _live.shutdown()
            self._session = Session(self.settings).start()
            _live = self
            return self._session

    def ranks(self, kind: str, source: Callable[[], ReplicaSource]) -> TileRanks:
        """The ranks that share one kind of job's tiles: ONE_RANK with one rank, else this group's `GroupRanks`,
        whose workers run the jobs on their `kind` replica of `source()` (read at each job). LTX's jobs and
        replica sources are defined next to their tile loops (ltx.model.job, ltx.vae.job)."""
        return ONE_RANK if self.rank_count == 1 else GroupRanks(self, kind, source)

    def shutdown(self) -> None:
        global _live
        with _lock:
            session, self._session = self._session, None
            if _live is self:
                _live = None
        if session is not None:
            session.close()


class GroupRanks:
    """TileRanks over a group: one kind of job on its live session (started, or restarted, here)."""

    def __init__(self, group: TDPGroup, kind: str, source: Callable[[], ReplicaSource]):
        self.group, self.kind, self.source = group, kind, source

    def reduce(self, job: ReduceJob, partial: Partial) -> torch.Tensor:
        return self.group.session().reduce(self.kind, self.source(), job, partial)

    def gather(self, job: GatherJob, partial: Partial, plan: TilePlan, add: AddTile) -> None:
        self.group.session().gather(self.kind, self.source(), job, partial, plan, add)


def get_group(settings: GroupSettings) -> TDPGroup:
    """The group for `settings` (one per distinct settings), not yet started."""
    with _lock:
        group = _groups.get(settings)
        if group is None:
            group = _groups[settings] = TDPGroup(settings)
        return group


def shutdown_all() -> None:
    """End every live session (atexit, tests)."""
    with _lock:
        groups = list(_groups.values())
    for g in groups:
        try:
            g.shutdown()
        except Exception as e:  # at exit: log, never raise
            log.warning("LTX TDP: shutting down %r: %s", g, e)


atexit.register(shutdown_all)
