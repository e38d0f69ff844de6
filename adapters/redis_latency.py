"""The latency board (:class:`emq.core.latency.LatencyBoard`) in Redis, and in memory.

Time is cut into slots of ``SLOT_S`` seconds; each topic has one small hash per slot (bucket
index -> deliveries), which workers add to with ``HINCRBY`` (so the workers' counts add up in
Redis, with no per-worker field to age out) and which expires on its own after the window.
Reading a topic's window reads its last ``SLOTS`` slots and the current one: the last 60 to 75
seconds, never more, whatever the traffic (bounded: ``SLOTS + 1`` small hashes per topic, read
in one pipeline for every topic of a console poll).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import redis.asyncio as aioredis
from redis import exceptions as rex

from emq.core.errors import BackendUnavailable
from emq.core.latency import BUCKETS, LatencyBoard
from emq.core.naming import RedisKeys

SLOT_S = 15
SLOTS = 4  # full slots in the window (plus the current one): 60 s to 75 s
TTL_S = SLOT_S * (SLOTS + 2)
_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError)


def _slots(now: float) -> range:
    current = int(now // SLOT_S)
    return range(current - SLOTS, current + 1)


class RedisLatencyBoard(LatencyBoard):
    """Owns nothing: the client is the caller's."""

    window_s = SLOT_S * SLOTS

    def __init__(self, client: aioredis.Redis | aioredis.RedisCluster, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        slot = int(time.time() // SLOT_S)
        pipe = self._client.pipeline(transaction=False)
        queued = False
        for topic, histogram in counts.items():
            key = self._keys.latency(topic, slot)
            for i, n in enumerate(histogram):
                if n > 0:
                    pipe.hincrby(key, str(i), n)
                    queued = True
            pipe.expire(key, TTL_S)
        if not queued:
            return
        try:
            await pipe.execute()
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable while adding latency: {e}") from e

    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        if not topics:
            return {}
        slots = _slots(time.time())
        pipe = self._client.pipeline(transaction=False)
        for topic in topics:
            for slot in slots:
                pipe.hgetall(self._keys.latency(topic, slot))
        try:
            replies = await pipe.execute()
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable while reading latency: {e}") from e
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
