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

**Coalesced.** The version reads and event records asked for during one event-loop iteration
go to Redis as one pipeline, sent on the next iteration (:class:`_Coalesced`, as the API's
puts are: :mod:`emq.api.coalesce`): under load, the publishes of many requests share one round
trip, which redis-py's per-call cost makes the larger part of a small event's CPU. A read joins
only a pipeline not yet sent, so it is never older than its caller's request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

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
# KEYS: version, then one event key per record; ARGV: ttl_s, then per record: type, accepted
# ms, n, then n (subscription id, job id) pairs -> the version. One command for a request's
# records and its version check (redis-py spends ~20 us of Python per pipelined command).
_RECORD = """
local ttl = tonumber(ARGV[1])
local at = 2
for i = 2, #KEYS do
  local n = tonumber(ARGV[at + 2])
  redis.call('HSET', KEYS[i], '~type', ARGV[at])
  redis.call('HSETNX', KEYS[i], '~t', ARGV[at + 1])
  if n > 0 then redis.call('HSET', KEYS[i], unpack(ARGV, at + 3, at + 2 + 2 * n)) end
  redis.call('EXPIRE', KEYS[i], ttl)
  at = at + 3 + 2 * n
end
return redis.call('GET', KEYS[1]) or 0
"""
_RECORD_SHA = hashlib.sha1(_RECORD.encode()).hexdigest()
_ATTEMPTS = 8


def _encode(sub: Subscription) -> str:
    return json.dumps(sub.to_dict(), separators=(",", ":"))


_Op = tuple[Callable[[Any], None], "asyncio.Future[Any]"]


class _Coalesced:
    """Commands of one loop iteration, sent as one non-transactional pipeline on the next; each
    caller awaits its own command's reply (a failed pipeline fails every caller)."""

    def __init__(self, client: aioredis.Redis | aioredis.RedisCluster) -> None:
        self._client = client
        self._waiting: list[_Op] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, add: Callable[[Any], None]) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._flush)
        self._waiting.append((add, done))
        return await done

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        task = asyncio.create_task(self._send(waiting))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _execute(self, waiting: list[_Op]) -> list[Any]:
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for add, _ in waiting:
                add(pipe)
            try:
                return list(await pipe.execute())
            except rex.NoScriptError:  # a restarted or flushed server: load it, send again
                if attempt:
                    raise
                await self._client.script_load(_RECORD)  # (every write in it is idempotent)
        raise AssertionError("unreachable")

    async def _send(self, waiting: list[_Op]) -> None:
        try:
            replies = await self._execute(waiting)
        except BaseException as e:
            for _, done in waiting:
                if not done.done():
                    done.set_exception(e if isinstance(e, Exception) else asyncio.CancelledError())
            if not isinstance(e, Exception):
                raise
            return
        at = 0
        for add, done in waiting:
            n = getattr(add, "commands", 1)
            if not done.done():
                done.set_result(replies[at] if n == 1 else replies[at : at + n])
            at += n


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
        self._batch = _Coalesced(client)

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
        version = int(await self._call(self._batch.run(lambda pipe: pipe.get(version_key))) or 0)
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

    def cached(self, ref: TopicRef) -> Snapshot | None:
        return self._snapshots.get(ref)

    async def record_if_current(
        self, ref: TopicRef, version: int, records: Sequence[EventRecord]
    ) -> bool:
        """One coalesced command: the records' writes and the version's read."""
        return int(await self._call(self._batch.run(self._record(ref, records)))) == version

    async def record_events(self, ref: TopicRef, records: Sequence[EventRecord]) -> None:
        await self._call(self._batch.run(self._record(ref, records)))

    def _record(self, ref: TopicRef, records: Sequence[EventRecord]) -> Callable[[Any], None]:
        keys = [self._keys.subscriptions_version(ref)]
        args: list[Any] = [self._ttl_s]
        for r in records:
            keys.append(self._keys.event(ref, r.id))
            args += (r.type, r.accepted_ms, len(r.deliveries))
            for pair in r.deliveries.items():
                args += pair
        return lambda pipe: pipe.execute_command("EVALSHA", _RECORD_SHA, len(keys), *keys, *args)

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
