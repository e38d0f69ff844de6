"""An in-process :class:`~emq.core.rollouts.RolloutStore` for unit tests and single-process use
(the same contract as the Redis one, expiry included)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from emq.core.rollouts import RETENTION_S, RolloutStore


class MemoryRolloutStore(RolloutStore):
    """Rollouts in a dict with their expiry; ``clock`` gives epoch seconds."""

    def __init__(
        self, *, retention_s: float = RETENTION_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._retention_s = retention_s
        self._clock = clock
        self._kept: dict[str, tuple[float, dict[str, Any]]] = {}
        self._latest: str | None = None

    async def save(self, rollout: dict[str, Any], latest: bool = False) -> None:
        now = self._clock()
        self._kept = {k: v for k, v in self._kept.items() if v[0] > now}
        self._kept[rollout["id"]] = (now + self._retention_s, copy.deepcopy(rollout))
        if latest:
            self._latest = rollout["id"]

    async def get(self, rollout_id: str) -> dict[str, Any] | None:
        kept = self._kept.get(rollout_id)
        if kept is None or kept[0] <= self._clock():
            return None
        return copy.deepcopy(kept[1])

    async def latest(self) -> dict[str, Any] | None:
        return None if self._latest is None else await self.get(self._latest)

    async def aclose(self) -> None:
        return None
