"""The latest capacity plans in Redis: one list, newest first, trimmed on every save.

Each entry is the stored plan as JSON. A save is one transaction (push, trim, count), so two
APIs saving at once never leave more than ``keep`` plans.
"""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from emq.core.naming import RedisKeys
from emq.core.plans import PlanStore, StoredPlan


class RedisPlanStore(OwnedClient, PlanStore):
    """Owns the client's lifetime only if ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._key = keys.plans()

    async def save(self, plan: StoredPlan, keep: int) -> int:
        entry = {"id": plan.id, "stored_at": plan.stored_at, "source": plan.source}
        text = json.dumps(entry | {"plan": plan.plan}, separators=(",", ":"))
        pipe = self._client.pipeline(transaction=True)
        pipe.lpush(self._key, text)
        pipe.ltrim(self._key, 0, max(1, keep) - 1)
        pipe.llen(self._key)
        with translated("storing a plan"):
            *_, kept = await pipe.execute()
        return int(kept)

    async def latest(self) -> StoredPlan | None:
        pipe = self._client.pipeline(transaction=False)
        pipe.lindex(self._key, 0)
        pipe.llen(self._key)
        with translated("reading plans"):
            raw, kept = await pipe.execute()
        if raw is None:
            return None
        d = json.loads(raw)
        return StoredPlan(d["id"], d["stored_at"], d["source"], d["plan"], int(kept))
