"""Subscriptions and event records in Redis (:class:`~emq.core.subscriptions.SubscriptionStore`).

Layout (spelled by :class:`~emq.core.naming.RedisKeys`; all of a topic's keys share its hash
tag, so each change is one transaction on one Cluster shard)::

    <prefix>:subs:{ns:tenant:topic}          hash: subscription id -> JSON (no secret: derived)
    <prefix>:subs:{ns:tenant:topic}:v        bumped by every change of the hash
    <prefix>:evt:{ns:tenant:topic}:<event>   hash: ~type, ~t (ms), subscription id -> job id;
                                             expires after ``event_ttl_s``

**Reads for events.** Publishing an event reads the version (one GET); the decoded snapshot is
reused while the version is the one it was read at, so a topic's 100 subscriptions are decoded
once per change, not once per event, and a change stored before the GET (by any API process)
applies to the event. A create checks the count and writes in one script (the limit holds
against concurrent creates); an update is compare-and-set on the stored JSON, retried.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis
from redis import exceptions as rex

from adapters.redis_conn import OwnedClient
from emq.core.errors import BackendUnavailable, ConfigConflict, NotFound
from emq.core.naming import RedisKeys
from emq.core.refs import TopicRef
from emq.core.subscriptions import (
    EventRecord,
    Snapshot,
    Subscription,
    SubscriptionLimit,
    SubscriptionStore,
)

_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError)

# KEYS: hash, version; ARGV: id, json, limit. 0: at the limit; 1: stored.
_CREATE = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
"""
# KEYS: hash, version; ARGV: id, expected json, new json. -1: gone; 0: changed meanwhile; 1: set.
_SWAP = """
local now = redis.call('HGET', KEYS[1], ARGV[1])
if not now then return -1 end
if now ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('INCR', KEYS[2])
return 1
"""
_ATTEMPTS = 8


def _encode(sub: Subscription) -> str:
    return json.dumps(sub.to_dict(), separators=(",", ":"))


class RedisSubscriptionStore(OwnedClient, SubscriptionStore):
    """Owns the client's lifetime only if ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        event_ttl_s: int = 3600,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys
        self._ttl_s = max(1, event_ttl_s)
        self._create = client.register_script(_CREATE)
        self._swap = client.register_script(_SWAP)
        self._snapshots: dict[TopicRef, Snapshot] = {}

    def _pair(self, ref: TopicRef) -> list[str]:
        return [self._keys.subscriptions(ref), self._keys.subscriptions_version(ref)]

    async def create(self, ref: TopicRef, sub: Subscription, limit: int) -> None:
        try:
            stored = await self._create(keys=self._pair(ref), args=[sub.id, _encode(sub), limit])
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable while storing a subscription: {e}") from e
        if not stored:
            raise SubscriptionLimit(
                "subscription", f"topic {ref} already has {limit} subscriptions (the most)"
            )

    async def list(self, ref: TopicRef) -> list[Subscription]:
        return list((await self.snapshot(ref)).subscriptions)

    async def get(self, ref: TopicRef, sub_id: str) -> Subscription:
        raw = await self._call(self._client.hget(self._keys.subscriptions(ref), sub_id))
        if raw is None:
            raise NotFound(f"no subscription {sub_id} in topic {ref}")
        return Subscription.from_dict(json.loads(raw))

    async def update(
        self, ref: TopicRef, sub_id: str, change: Callable[[Subscription], Subscription]
    ) -> Subscription:
        for _ in range(_ATTEMPTS):
            raw = await self._call(self._client.hget(self._keys.subscriptions(ref), sub_id))
            if raw is None:
                raise NotFound(f"no subscription {sub_id} in topic {ref}")
            new = change(Subscription.from_dict(json.loads(raw)))
            swapped = await self._call(
                self._swap(keys=self._pair(ref), args=[sub_id, raw, _encode(new)])
            )
            if swapped == 1:
                return new
            if swapped == -1:
                raise NotFound(f"no subscription {sub_id} in topic {ref}")
        raise ConfigConflict(f"subscription {sub_id} kept changing; try again")

    async def delete(self, ref: TopicRef, sub_id: str) -> None:
        pipe = self._client.pipeline(transaction=True)
        key, version = self._pair(ref)
        pipe.hdel(key, sub_id)
        pipe.incr(version)
        removed, _ = await self._call(pipe.execute())
        if not removed:
            raise NotFound(f"no subscription {sub_id} in topic {ref}")

    async def snapshot(self, ref: TopicRef) -> Snapshot:
        key, version_key = self._pair(ref)
        version = int(await self._call(self._client.get(version_key)) or 0)
        known = self._snapshots.get(ref)
        if known is not None and known.version == version:
            return known
        pipe = self._client.pipeline(transaction=True)
        pipe.get(version_key)
        pipe.hgetall(key)
        raw_version, raw = await self._call(pipe.execute())
        subs = [Subscription.from_dict(json.loads(v)) for v in raw.values()]
        snap = Snapshot(int(raw_version or 0), subs)
        if len(self._snapshots) > 10_000:  # bounded: topics that publish come back
            self._snapshots.clear()
        self._snapshots[ref] = snap
        return snap

    async def record_events(self, ref: TopicRef, records: Sequence[EventRecord]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for r in records:
            key = self._keys.event(ref, r.id)
            pipe.hsetnx(key, "~type", r.type)
            pipe.hsetnx(key, "~t", r.accepted_ms)
            if r.deliveries:
                pipe.hset(key, mapping=dict(r.deliveries))
            pipe.expire(key, self._ttl_s)
        await self._call(pipe.execute())

    async def event(self, ref: TopicRef, event_id: str) -> EventRecord:
        raw = await self._call(self._client.hgetall(self._keys.event(ref, event_id)))
        if not raw:
            raise NotFound(f"no event {event_id} in topic {ref} (events are kept {self._ttl_s} s)")
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        kind, accepted = fields.pop("~type"), int(fields.pop("~t"))
        return EventRecord(event_id, kind, accepted, fields)

    async def _call(self, awaitable):  # type: ignore[no-untyped-def]
        try:
            return await awaitable
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable (subscriptions): {e}") from e
