"""Plan rollouts in Redis: one JSON string per rollout, expiring ``retention_s`` after its
last update, and the id of the latest (which expires with it)."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from emq.core.naming import RedisKeys
from emq.core.rollouts import RETENTION_S, RolloutStore


class RedisRolloutStore(OwnedClient, RolloutStore):
    """Owns the client's lifetime only if ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        retention_s: float = RETENTION_S,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys
        self._ttl = max(1, int(retention_s))

    async def save(self, rollout: dict[str, Any], latest: bool = False) -> None:
        text = json.dumps(rollout, separators=(",", ":"))
        with translated("storing a rollout"):
            await self._client.set(self._keys.rollout(rollout["id"]), text, ex=self._ttl)
            if latest:
                await self._client.set(self._keys.rollouts_latest(), rollout["id"], ex=self._ttl)

    async def get(self, rollout_id: str) -> dict[str, Any] | None:
        with translated("reading a rollout"):
            raw = await self._client.get(self._keys.rollout(rollout_id))
        return None if raw is None else dict(json.loads(raw))

    async def latest(self) -> dict[str, Any] | None:
        with translated("reading rollouts"):
            raw = await self._client.get(self._keys.rollouts_latest())
        if raw is None:
            return None
        return await self.get(raw.decode() if isinstance(raw, bytes) else str(raw))
