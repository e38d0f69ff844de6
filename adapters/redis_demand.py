"""The demand board on Redis: one hash per capped tenant and namespace, a field per worker.

Each exchange is one pipelined round trip for all of a worker's capped tenants: ``HSET`` its
field (``{"t": published at, "l": {topic: [backlogged, rate]}}``), ``PEXPIRE`` the hash (a
tenant nobody owns any more leaves nothing behind) and ``HGETALL``. Posts older than
``stale_s`` (a worker that stopped or lost its groups) are ignored, and deleted by a reader once
``DROP_AFTER`` times that old. The fleet's clocks are assumed to agree within a fraction of
``stale_s``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from emq.core.demand import DemandBoard, Loads, TopicLoad
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace
from emq.core.naming import RedisKeys

KEEP_FOR = 10  # the hash outlives its last post by this many stale_s
DROP_AFTER = 5  # a post this many stale_s old is deleted by the next reader


class RedisDemandBoard(OwnedClient, DemandBoard):
    """Owns the client's lifetime only if ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys

    async def exchange(
        self, namespace: Namespace, worker_id: str, mine: Mapping[str, Loads], stale_s: float
    ) -> dict[str, list[Loads]]:
        """Publish ``mine`` and read every fresh post of the same tenants (one round trip)."""
        now = time.time()
        keys = {tenant: self._keys.tenant_demand(namespace, tenant) for tenant in mine}
        pipe = self._client.pipeline(transaction=False)
        for tenant, loads in mine.items():
            post = {"t": now, "l": {name: load.to_list() for name, load in loads.items()}}
            pipe.hset(keys[tenant], worker_id, json.dumps(post))
            pipe.pexpire(keys[tenant], int(stale_s * KEEP_FOR * 1000))
            pipe.hgetall(keys[tenant])
        with translated("exchanging tenant demand"):
            replies = await pipe.execute()
        out: dict[str, list[Loads]] = {}
        stale: list[tuple[str, bytes]] = []
        for i, tenant in enumerate(mine):
            posts = replies[3 * i + 2]
            out[tenant] = self._fresh(posts, now - stale_s)
            # (only long-gone posts: a late writer's field deleted under it would hide its
            # demand for a period)
            stale += [(keys[tenant], w) for w in self._gone(posts, now - stale_s * DROP_AFTER)]
        if stale:
            await self._forget(stale)
        return out

    @staticmethod
    def _read(raw: bytes) -> tuple[float, Loads] | None:
        try:
            post: Any = json.loads(raw)
            loads = {str(n): TopicLoad.from_list(v) for n, v in post["l"].items()}
            return float(post["t"]), loads
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # unreadable: a writer we do not know

    @classmethod
    def _fresh(cls, posts: Mapping[bytes, bytes], since: float) -> list[Loads]:
        read = (cls._read(raw) for raw in posts.values())
        return [r[1] for r in read if r is not None and r[0] >= since]

    @classmethod
    def _gone(cls, posts: Mapping[bytes, bytes], before: float) -> list[bytes]:
        return [w for w, raw in posts.items() if (r := cls._read(raw)) is None or r[0] < before]

    async def _forget(self, stale: list[tuple[str, bytes]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for key, worker in stale:
            pipe.hdel(key, worker)
        with (
            contextlib.suppress(BackendUnavailable),
            translated("forgetting demand"),
        ):  # (the next reader deletes them)
            await pipe.execute()
