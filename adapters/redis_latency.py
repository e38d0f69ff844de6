"""The latency board (:class:`emq.core.latency.LatencyBoard`) in Redis, and in memory.

Time is cut into slots of ``SLOT_S`` seconds; each topic has one small hash per slot (bucket
index -> deliveries), which workers add to with ``HINCRBY`` (so the workers' counts add up in
Redis, with no per-worker field to age out) and which expires on its own after the window.
Reading a topic's window reads its last ``SLOTS`` slots and the current one: the last 60 to 75
seconds, never more, whatever the traffic (bounded: ``SLOTS + 1`` small hashes per topic, read
in one pipeline for every topic of a console poll).

A worker adds the counts of every topic it delivered for every few seconds: one ``HINCRBY`` a
non-empty bucket and an ``EXPIRE`` a topic, ~10 commands a topic, was 6 % of the CPU of a worker
delivering for 1 000 topics (``emq bench dispatch --workload W2 --noop``, sampled with py-spy:
building and packing the commands in redis-py). :data:`ADD` does a topic's in one call, and on a
standalone Redis ``ADD_CHUNK`` topics' in one call (a Cluster: one a topic, whose keys share a
hash tag, so every call stays on one slot).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from adapters.redis_conn import RedisCalls, translated
from adapters.redis_replies import Command
from emq.core.interfaces import BackendHealth
from emq.core.latency import BUCKETS, LatencyBoard
from emq.core.naming import RedisKeys

SLOT_S = 15
SLOTS = 4  # full slots in the window (plus the current one): 60 s to 75 s
TTL_S = SLOT_S * (SLOTS + 2)


def _slots(now: float) -> range:
    current = int(now // SLOT_S)
    return range(current - SLOTS, current + 1)


# KEYS: one hash a topic (this slot's); ARGV: the TTL, then for each key in turn the number of
# its non-empty buckets and that many (bucket, count) pairs.
ADD = """
local ttl = ARGV[1]
local at = 2
for k = 1, #KEYS do
  local key = KEYS[k]
  local pairs = tonumber(ARGV[at])
  for i = at + 1, at + 2 * pairs, 2 do
    redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', key, ttl)
  at = at + 1 + 2 * pairs
end
return #KEYS
"""
ADD_CHUNK = 256  # topics a call on a standalone Redis (a call holds the server for ~0.5 ms)


class RedisLatencyBoard(LatencyBoard):
    """Owns nothing: the client is the caller's."""

    window_s = SLOT_S * SLOTS

    def __init__(self, client: aioredis.Redis | aioredis.RedisCluster, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._add = client.register_script(ADD)
        self._calls = RedisCalls(client, [self._add], BackendHealth())  # (NOSCRIPT: reloaded)
        self._chunk = 1 if isinstance(client, RedisCluster) else ADD_CHUNK

    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        slot = int(time.time() // SLOT_S)
        sha = self._add.sha
        calls: list[Command] = []
        keys: list[str] = []
        args: list[int] = []
        for topic, histogram in counts.items():
            buckets = [(i, n) for i, n in enumerate(histogram) if n > 0]
            if not buckets:
                continue
            keys.append(self._keys.latency(topic, slot))
            args.append(len(buckets))
            for i, n in buckets:
                args.append(i)
                args.append(n)
            if len(keys) == self._chunk:
                calls.append(("EVALSHA", sha, len(keys), *keys, TTL_S, *args))
                keys, args = [], []
        if keys:
            calls.append(("EVALSHA", sha, len(keys), *keys, TTL_S, *args))
        # Not repeatable: sent twice after a broken connection, counts would be added twice.
        await self._calls.pipeline(calls, "adding latency", repeatable=False)

    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        if not topics:
            return {}
        slots = _slots(time.time())
        pipe = self._client.pipeline(transaction=False)
        for topic in topics:
            for slot in slots:
                pipe.hgetall(self._keys.latency(topic, slot))
        with translated("reading latency"):
            replies = await pipe.execute()
        out: dict[str, list[int]] = {}
        per_topic = len(slots)
        for t, topic in enumerate(topics):
            total = [0] * BUCKETS
            for reply in replies[t * per_topic : (t + 1) * per_topic]:
                for field, value in (reply or {}).items():
                    i = int(field)
                    if 0 <= i < BUCKETS:  # a field of other buckets (a newer worker): ignored
                        total[i] += int(value)
            if any(total):
                out[topic] = total
        return out


class MemoryLatencyBoard(LatencyBoard):
    """The same slots in a dictionary (single-process use and unit tests)."""

    window_s = SLOT_S * SLOTS

    def __init__(self) -> None:
        self._slots: dict[tuple[str, int], list[int]] = {}

    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        slot = int(time.time() // SLOT_S)
        for topic, histogram in counts.items():
            kept = self._slots.setdefault((topic, slot), [0] * BUCKETS)
            for i, n in enumerate(histogram[:BUCKETS]):
                kept[i] += n
        for key in [k for k in self._slots if k[1] < slot - SLOTS]:
            del self._slots[key]

    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        slots = _slots(time.time())
        out: dict[str, list[int]] = {}
        for topic in topics:
            total = [0] * BUCKETS
            for slot in slots:
                for i, n in enumerate(self._slots.get((topic, slot), ())):
                    total[i] += n
            if any(total):
                out[topic] = total
        return out
