"""The demand board in memory: the workers of one process (tests, single-process use)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from emq.core.demand import DemandBoard, Loads
from emq.core.model import Namespace


class MemoryDemandBoard(DemandBoard):
    """Share one instance among the workers that should see each other."""

    def __init__(self) -> None:
        self._posts: dict[tuple[str, str], dict[str, tuple[float, Loads]]] = {}

    async def aclose(self) -> None:
        """Nothing to release."""

    async def exchange(
        self, namespace: Namespace, worker_id: str, mine: Mapping[str, Loads], stale_s: float
    ) -> dict[str, list[Loads]]:
        """Publish ``mine`` and read every fresh post of the same tenants."""
        now = time.time()
        out: dict[str, list[Loads]] = {}
        for tenant, loads in mine.items():
            posts = self._posts.setdefault((namespace.value, tenant), {})
            posts[worker_id] = (now, loads)
            out[tenant] = [p for at, p in posts.values() if now - at <= stale_s]
        return out
