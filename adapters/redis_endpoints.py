"""The endpoint status board in Redis (:class:`~emq.core.endpoints.EndpointBoard`).

One hash: a field ``<topic>|<worker>`` per topic and worker, its value the worker's statuses of
the topic's endpoints with the time they were posted. Readers take fresh ones (a worker posts
once a second) and delete those a minute old (a worker gone). An in-memory twin serves tests and
single-process use.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from emq.core.endpoints import EndpointBoard
from emq.core.naming import RedisKeys

STALE_S = 60.0


def _fresh(raw: bytes | str, source: str, max_age_s: float, now: float) -> list[dict[str, Any]]:
    posted = json.loads(raw)
    if now - float(posted.get("at", 0)) > max_age_s:
        return []
    return [dict(row, worker=source) for row in posted.get("endpoints", [])]


class RedisEndpointBoard(OwnedClient, EndpointBoard):
    """Owns the client's lifetime only if ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._key = keys.endpoint_board()

    async def publish(self, source: str, topics: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        now = round(time.time(), 3)
        posts = {
            f"{t}|{source}": json.dumps({"at": now, "endpoints": list(rows)})
            for t, rows in topics.items()
            if rows
        }
        gone = [f"{t}|{source}" for t, rows in topics.items() if not rows]
        with translated("posting endpoints"):
            if posts:
                await self._client.hset(self._key, mapping=posts)  # type: ignore[arg-type]
            if gone:
                await self._client.hdel(self._key, *gone)

    async def read(self, topic: str, max_age_s: float = 5.0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        stale = []
        now = time.time()
        with translated("reading endpoints"):
            async for field, value in self._client.hscan_iter(self._key, match=f"{topic}|*"):
                source = field.decode().rpartition("|")[2]
                rows = _fresh(value, source, max_age_s, now)
                out.extend(rows)
                if not rows and not _fresh(value, source, STALE_S, now):
                    stale.append(field)
            if stale:
                await self._client.hdel(self._key, *stale)
        return sorted(out, key=lambda r: (r["endpoint"], r["worker"]))


class MemoryEndpointBoard(EndpointBoard):
    def __init__(self) -> None:
        self._posts: dict[tuple[str, str], str] = {}

    async def publish(self, source: str, topics: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        now = time.time()
        for t, rows in topics.items():
            if rows:
                self._posts[(t, source)] = json.dumps({"at": now, "endpoints": list(rows)})
            else:
                self._posts.pop((t, source), None)

    async def read(self, topic: str, max_age_s: float = 5.0) -> list[dict[str, Any]]:
        now = time.time()
        out = [
            row
            for (t, source), raw in self._posts.items()
            if t == topic
            for row in _fresh(raw, source, max_age_s, now)
        ]
        return sorted(out, key=lambda r: (r["endpoint"], r["worker"]))
