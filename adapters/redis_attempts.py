"""The attempt log, the job search indexes and the delivered log on Redis
(:class:`~emq.core.attempts.AttemptStore`; docs/concepts/attempts.md).

Keys (:class:`~emq.core.naming.RedisKeys`):

* ``attempts(slice, shard)``: hash ``<job id>.<n>`` -> attempt ``n`` (JSON, see
  :class:`~emq.core.attempts.Attempt`). ``slice`` is ``now // (ttl / SLICES)``, ``shard`` one
  of :data:`SHARDS` by the job id. A hash expires ``ttl`` after its slice ends, so an attempt
  stays readable as long as its job's record. ``attempt_bytes()`` counts the bytes written per
  slice; :meth:`RedisAttemptStore.trim` deletes the oldest slices while the namespace is over
  its budget (oldest out first, a slice at a time: ``ttl / SLICES`` of attempts).
* ``job_index(topic, "s:<state>")``, ``job_index(topic, "k:<hash>")``,
  ``job_index(topic, "i:<hash>")``: sorted sets job id -> its latest outcome's time, by state,
  by ``key``, by ``idempotency_key``; each expires ``ttl`` after its last write, and the state
  ones are trimmed to ``ttl`` by :meth:`RedisAttemptStore.trim`. A member's state set may be
  stale (the job moved on): a search reads each candidate's record and keeps the true state.
* ``delivered_log(group)``: stream of the group's delivered jobs as stored (``d``: the
  envelope, its attempts counted), appended with ``MINID ~`` the topic's ``keep_delivered_s``.

All writes are added to the job records' pipeline (:func:`add_writes`): one round trip per flush.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Sequence
from typing import Any

from redis import exceptions as rex

from emq.core.attempts import Attempt, AttemptStore, AttemptWrite, Found, IndexEntry, Search
from emq.core.errors import BackendUnavailable
from emq.core.jobs import JobRecord
from emq.core.model import QueueRef
from emq.core.naming import RedisKeys

SHARDS = 16
SLICES = 8  # time slices per retention: the budget's trim drops 1/8 of the retention at a time
FIELD_OVERHEAD_BYTES = (
    80  # a hash field's own memory (hashtable entry, key sds, allocator), counted
)
MAX_ATTEMPTS_READ = 200
STATES = ("delivered", "retry_wait", "dead")


_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError)


async def run_pipeline(what: str, pipe: Any) -> list[Any]:
    """Execute ``pipe``; a connection failure is :class:`BackendUnavailable`."""
    try:
        replies: list[Any] = await pipe.execute()
    except _UNAVAILABLE as e:
        raise BackendUnavailable(f"redis unavailable during {what}: {e}") from e
    return replies


def slice_s(ttl_s: int) -> int:
    return max(1, ttl_s // SLICES)


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def index_names(entry: IndexEntry) -> list[str]:
    """The ``what`` of each index ``entry`` goes in."""
    out = ["s:" + entry.state]
    if entry.key is not None:
        out.append("k:" + _hash(entry.key))
    if entry.idempotency_key is not None:
        out.append("i:" + _hash(entry.idempotency_key))
    return out


def add_writes(
    pipe: Any,
    keys: RedisKeys,
    ttl_s: int,
    now_s: float,
    attempts: Sequence[AttemptWrite],
    index: Sequence[IndexEntry],
    delivered: Sequence[tuple[QueueRef, int, bytes]],
) -> None:
    """Queue the writes of a flush on ``pipe``: attempts (job id, n, stored form), index entries,
    delivered jobs (their queue, keep ms, payload)."""
    if attempts:
        span = slice_s(ttl_s)
        bucket = int(now_s // span)
        expire_at = (bucket + 1) * span + ttl_s
        shards: list[list[Any]] = [[] for _ in range(SHARDS)]
        crc32 = zlib.crc32
        size = 0
        for job_id, n, encoded in attempts:
            fields = shards[crc32(job_id.encode()) % SHARDS]
            name = f"{job_id}.{n}"
            fields.append(name)
            fields.append(encoded)
            size += len(name) + len(encoded) + FIELD_OVERHEAD_BYTES
        for shard, fields in enumerate(shards):
            if fields:
                key = keys.attempts(bucket, shard)
                pipe.execute_command("HSET", key, *fields)
                pipe.expireat(key, expire_at)
        pipe.hincrby(keys.attempt_bytes(), str(bucket), size)
    if index:
        sets: dict[str, list[Any]] = {}
        topics = set()
        for e in index:
            topics.add(e.topic)
            for what in index_names(e):
                members = sets.setdefault(keys.job_index(e.topic, what), [])
                members.append(e.at_ms)
                members.append(e.job_id)
        expire_s = ttl_s + slice_s(ttl_s)
        for key, members in sets.items():
            pipe.execute_command("ZADD", key, *members)
            pipe.expire(key, expire_s)
        pipe.sadd(keys.indexed_topics(), *topics)
    for queue, keep_ms, payload in delivered:
        minid = max(0, int(now_s * 1000) - keep_ms)
        log_key = keys.delivered_log(queue.group)
        priority = queue.priority.value  # (the fields of a dead letter: a replay moves either)
        pipe.execute_command(
            "XADD", log_key, "MINID", "~", minid, "*", "priority", priority, "payload", payload
        )


def _text(raw: Any) -> str | None:
    if raw is None or raw is False:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisAttemptStore(AttemptStore):
    """Reads and trims of the attempt log and the indexes (on the job store's client)."""

    def __init__(self, client: Any, keys: RedisKeys, ttl_s: int, records: Any) -> None:
        self._client = client
        self._keys = keys
        self.ttl_s = ttl_s
        self._records = records  # (job id) -> its latest JobRecord, batched: RedisJobStore

    async def _run(self, what: str, pipe: Any) -> list[Any]:
        return await run_pipeline(what, pipe)

    def _buckets(self, now_s: float) -> range:
        span = slice_s(self.ttl_s)
        newest = int(now_s // span)
        return range(newest - SLICES - 1, newest + 1)

    async def attempts(self, job_id: str, most: int = MAX_ATTEMPTS_READ) -> list[Attempt]:
        if self.ttl_s <= 0:
            return []
        shard = zlib.crc32(job_id.encode()) % SHARDS
        names = [f"{job_id}.{n}" for n in range(1, most + 1)]
        pipe = self._client.pipeline(transaction=False)
        for bucket in self._buckets(time.time()):
            pipe.hmget(self._keys.attempts(bucket, shard), names)
        found: dict[int, Attempt] = {}
        for values in await self._run("attempt log", pipe):
            for raw in values:
                if raw is not None:
                    attempt = Attempt.decode(raw)
                    found[attempt.n] = attempt
        return [found[n] for n in sorted(found)]

    async def belongs(self, topic: str, job_id: str) -> bool:
        pipe = self._client.pipeline(transaction=False)
        for state in STATES:
            pipe.zscore(self._keys.job_index(topic, "s:" + state), job_id)
        return any(score is not None for score in await self._run("job lookup", pipe))

    async def search(self, topic: str, query: Search) -> tuple[list[Found], bool]:
        now_ms = int(time.time() * 1000)
        lo = max(query.since_ms or 0, now_ms - self.ttl_s * 1000)
        hi: float = float("inf") if query.until_ms is None else query.until_ms
        if query.after is not None:
            hi = min(hi, query.after[0])
        if query.key is not None:
            whats = ["k:" + _hash(query.key)]
        elif query.idempotency_key is not None:
            whats = ["i:" + _hash(query.idempotency_key)]
        elif query.state is not None:
            whats = ["s:" + query.state]
        else:
            whats = ["s:" + s for s in STATES]
        fetch = query.limit * 2 + 20
        pipe = self._client.pipeline(transaction=False)
        for what in whats:
            pipe.zrevrangebyscore(
                self._keys.job_index(topic, what),
                "+inf" if hi == float("inf") else int(hi),
                lo,
                start=0,
                num=fetch,
                withscores=True,
            )
        replies = await self._run("job search", pipe)
        more = any(len(r) >= fetch for r in replies)
        candidates: dict[str, int] = {}
        for reply in replies:
            for member, score in reply:
                job_id = _text(member) or ""
                candidates[job_id] = max(candidates.get(job_id, 0), int(score))
        ordered = sorted(candidates.items(), key=lambda c: (c[1], c[0]), reverse=True)
        if query.after is not None:
            at, last = query.after
            ordered = [c for c in ordered if (c[1], c[0]) < (at, last)]
        records: list[JobRecord | None] = await self._records([job_id for job_id, _ in ordered])
        out: list[Found] = []
        for (job_id, at_ms), record in zip(ordered, records, strict=True):
            if record is None or (query.state is not None and record.state != query.state):
                continue
            if record.at_ms != at_ms and query.key is None and query.idempotency_key is None:
                continue  # a stale entry of a state the job left (its current one is listed)
            if not lo <= record.at_ms <= hi:
                continue
            out.append(
                Found(
                    job_id, record.state, record.at_ms, record.attempt, record.status, record.error
                )
            )
            if len(out) == query.limit:
                return out, True
        return out, more

    async def trim(self, budget_bytes: int) -> int:
        """Forget slices past the retention, then drop the oldest while over the budget; trim
        the state indexes to the retention. Several workers may do it at once: each step is
        idempotent."""
        k = self._keys
        now = time.time()
        oldest = self._buckets(now)[0]
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(k.attempt_bytes())
        pipe.smembers(k.indexed_topics())
        sizes, topics = await self._run("attempt trim", pipe)
        buckets = sorted((int(b), int(n)) for b, n in sizes.items())
        gone = [b for b, _ in buckets if b < oldest]
        live = [(b, n) for b, n in buckets if b >= oldest]
        total = sum(n for _, n in live)
        dropped = 0
        while live and total > budget_bytes and budget_bytes >= 0:
            b, n = live.pop(0)
            gone.append(b)
            total -= n
            dropped += n
        pipe = self._client.pipeline(transaction=False)
        for b in gone:
            for shard in range(SHARDS):
                pipe.unlink(k.attempts(b, shard))
            pipe.hdel(k.attempt_bytes(), str(b))
        cutoff = int(now * 1000) - self.ttl_s * 1000
        for raw in topics:
            topic = _text(raw) or ""
            for state in STATES:
                pipe.zremrangebyscore(k.job_index(topic, "s:" + state), "-inf", f"({cutoff}")
        await self._run("attempt trim", pipe)
        return dropped
