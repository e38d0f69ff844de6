"""The attempt log, the job search indexes and the delivered log on Redis
(:class:`~emq.core.attempts.AttemptStore`; docs/concepts/attempts.md).

Keys (:class:`~emq.core.naming.RedisKeys`), in time slices of ``ttl / SLICES`` seconds:

* ``attempts(slice, shard)``: hash ``<job id>.<n>`` -> attempt ``n`` (JSON, see
  :class:`~emq.core.attempts.Attempt`); ``shard`` one of :data:`SHARDS` by the job id. A hash
  expires ``ttl`` after its slice ends, so an attempt stays readable as long as its job's
  record. ``attempt_bytes()`` counts the bytes written per slice (a hash field's measured
  overhead included); :meth:`RedisAttemptStore.trim` deletes the oldest slices while the
  namespace is over its budget (oldest out first, a slice at a time).
* ``job_index(slice, shard, what)``: sorted set, every score 0, ordered by its members' bytes:
  ``<topic hash>|<ms, 13 digits>|<job id>`` for a state (``what``: ``s:dead``, ...), and
  ``<topic hash>|<key hash>|<ms>|<job id>`` for a ``key`` (``k``) or an ``idempotency_key``
  (``i``); ``shard`` is the topic's. A topic's entries of a slice are one range
  (``ZRANGEBYLEX``), newest last. Each set expires with its slice: nothing to trim, and a
  flush writes a few sets (its slice's, per shard and kind), never one per topic or per key.
  A job's entry in a state it has left stays until its slice expires: a search reads each
  candidate's latest record and keeps the job once, in its true state.
* ``delivered_log(group)``: stream of the group's delivered jobs (the fields of a dead
  letter, ``priority`` and ``payload``: the envelope, its attempts counted), appended with
  ``MINID ~`` the topic's ``keep_delivered_s``; a redelivery copies from it
  (:mod:`adapters.redis_replay`).

All writes are added to the job records' pipeline (:func:`add_writes`): one round trip per flush.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Sequence
from typing import Any

from adapters.redis_conn import translated
from emq.core.attempts import Attempt, AttemptStore, AttemptWrite, Found, IndexWrite, Search
from emq.core.jobs import JobRecord
from emq.core.model import QueueRef
from emq.core.naming import RedisKeys

SHARDS = 16
# The attempt log's byte budget per namespace (docs/concepts/attempts.md): the oldest slices go
# first beyond it.
ATTEMPT_LOG_MAX_BYTES = 256 * 1024 * 1024
INDEX_SHARDS = 16  # hash tags of the topics' indexes
SLICES = 8  # time slices per retention: the budget's trim drops 1/8 of the retention at a time
FIELD_OVERHEAD_BYTES = 80  # a hash field's own memory (hashtable entry, key sds, allocator)
MAX_ATTEMPTS_READ = 200
STATES = ("delivered", "retry_wait", "dead")


async def run_pipeline(what: str, pipe: Any) -> list[Any]:
    """Execute ``pipe``; a connection failure is :class:`BackendUnavailable` (``translated``)."""
    with translated(what):
        replies: list[Any] = await pipe.execute()
    return replies


def slice_s(ttl_s: int) -> int:
    return max(1, ttl_s // SLICES)


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


_TOPICS: dict[str, tuple[int, str]] = {}  # topic -> (its index shard, its hash)


def topic_tag(topic: str) -> tuple[int, str]:
    """A topic's index shard and the hash its index entries start with."""
    found = _TOPICS.get(topic)
    if found is None:
        if len(_TOPICS) > 100_000:
            _TOPICS.clear()
        found = _TOPICS[topic] = (zlib.crc32(topic.encode()) % INDEX_SHARDS, _hash(topic)[:12])
    return found


def add_writes(
    pipe: Any,
    keys: RedisKeys,
    ttl_s: int,
    now_s: float,
    attempts: Sequence[AttemptWrite],
    index: Sequence[IndexWrite],
    delivered: Sequence[tuple[QueueRef, int, bytes]],
) -> None:
    """Queue the writes of a flush on ``pipe``: attempts (job id, n, stored form), index entries,
    delivered jobs (their queue, keep ms, payload)."""
    span = slice_s(ttl_s)
    bucket = int(now_s // span)
    expire_at = (bucket + 1) * span + ttl_s
    if attempts:
        shards: list[list[Any]] = [[] for _ in range(SHARDS)]
        crc32 = zlib.crc32
        size = 0
        for job_id, n, encoded in attempts:
            fields = shards[crc32(job_id.encode()) % SHARDS]
            fields.append(f"{job_id}.{n}")
            fields.append(encoded)
            size += len(encoded)
        size += len(attempts) * (len(attempts[0][0]) + 2 + FIELD_OVERHEAD_BYTES)  # (names)
        for shard, fields in enumerate(shards):
            if fields:
                key = keys.attempts(bucket, shard)
                pipe.execute_command("HSET", key, *fields)
                pipe.expireat(key, expire_at)
        pipe.hincrby(keys.attempt_bytes(), str(bucket), size)
    if index:
        for key, members in _index_members(keys, bucket, index).items():
            pipe.execute_command("EVAL", INDEX, 1, key, "\n".join(members), expire_at)
    for queue, keep_ms, payload in delivered:
        minid = max(0, int(now_s * 1000) - keep_ms)
        log_key = keys.delivered_log(queue.group)
        priority = queue.priority.value  # (the fields of a dead letter: a replay moves either)
        pipe.execute_command(
            "XADD", log_key, "MINID", "~", minid, "*", "priority", priority, "payload", payload
        )


# KEYS[1]: an index set  ARGV[1]: its new members, one a line  ARGV[2]: when it expires.
# The members travel as one argument: a flush packs one string per set, not two per job.
INDEX = """
local m = {}
for line in string.gmatch(ARGV[1], '[^\\n]+') do
  m[#m + 1] = 0
  m[#m + 1] = line
  if #m >= 1000 then
    redis.call('ZADD', KEYS[1], unpack(m))
    m = {}
  end
end
if #m > 0 then redis.call('ZADD', KEYS[1], unpack(m)) end
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return 1
"""


def _index_members(
    keys: RedisKeys, bucket: int, index: Sequence[IndexWrite]
) -> dict[str, list[str]]:
    """Per index set of the slice, its new members."""
    sets: dict[str, list[str]] = {}
    names: dict[tuple[int, str], str] = {}
    for topic, job_id, state, at_ms, key, idem in index:
        shard, tag = topic_tag(topic)
        name = names.get((shard, state))
        if name is None:
            name = names[shard, state] = keys.job_index(bucket, shard, "s:" + state)
        members = sets.get(name)
        if members is None:
            members = sets[name] = []
        members.append(f"{tag}|{at_ms:013d}|{job_id}")
        if key is not None:
            name = keys.job_index(bucket, shard, "k")
            sets.setdefault(name, []).append(f"{tag}|{_hash(key)}|{at_ms:013d}|{job_id}")
        if idem is not None:
            name = keys.job_index(bucket, shard, "i")
            sets.setdefault(name, []).append(f"{tag}|{_hash(idem)}|{at_ms:013d}|{job_id}")
    return sets


def _delivery(record: JobRecord) -> Attempt:
    duration = record.duration_ms or 0
    status = record.status or 0
    return Attempt(
        record.attempt, record.at_ms - duration, duration, status, "http", None, record.headers
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
        self._records = records  # (job ids) -> their latest JobRecords: RedisJobStore.latest

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
        (record,) = await self._records([job_id])
        if record is not None and record.state == "delivered" and record.attempt not in found:
            found[record.attempt] = _delivery(record)  # (a delivery's attempt is its record)
        return [found[n] for n in sorted(found)]

    async def belongs(self, topic: str, job_id: str) -> bool:
        (record,) = await self._records([job_id])
        if record is None or self.ttl_s <= 0:
            return False
        shard, tag = topic_tag(topic)
        bucket = int((record.at_ms / 1000) // slice_s(self.ttl_s))
        member = f"{tag}|{record.at_ms:013d}|{job_id}"
        pipe = self._client.pipeline(transaction=False)
        for b in (bucket - 1, bucket, bucket + 1):  # (the writer's clock: its flush's slice)
            pipe.zscore(self._keys.job_index(b, shard, "s:" + record.state), member)
        return any(score is not None for score in await self._run("job lookup", pipe))

    async def search(self, topic: str, query: Search) -> tuple[list[Found], bool]:
        now_ms = int(time.time() * 1000)
        lo = max(query.since_ms or 0, now_ms - self.ttl_s * 1000)
        hi = now_ms + 60_000 if query.until_ms is None else query.until_ms
        if query.after is not None:
            hi = min(hi, query.after[0])
        shard, tag = topic_tag(topic)
        if query.key is not None or query.idempotency_key is not None:
            what, value = (
                ("k", query.key) if query.key is not None else ("i", query.idempotency_key)
            )
            prefix, whats = f"{tag}|{_hash(value or '')}|", [what]
        else:
            prefix = tag + "|"
            whats = ["s:" + s for s in (STATES if query.state is None else (query.state,))]
        fetch = query.limit * 2 + 20
        pipe = self._client.pipeline(transaction=False)
        for bucket in reversed(self._buckets(now_ms / 1000)):
            for what in whats:
                pipe.zrevrangebylex(
                    self._keys.job_index(bucket, shard, what),
                    f"[{prefix}{hi:013d}|\xff",
                    f"[{prefix}{lo:013d}|",
                    start=0,
                    num=fetch,
                )
        replies = await self._run("job search", pipe)
        more = any(len(r) >= fetch for r in replies)
        candidates: dict[str, int] = {}
        for reply in replies:
            for member in reply:
                *_, at, job_id = (_text(member) or "").split("|")
                candidates[job_id] = max(candidates.get(job_id, 0), int(at))
        ordered = sorted(candidates.items(), key=lambda c: (c[1], c[0]), reverse=True)
        if query.after is not None:
            ordered = [c for c in ordered if (c[1], c[0]) < query.after]
        return self._found(
            query, lo, hi, ordered, await self._records([j for j, _ in ordered]), more
        )

    @staticmethod
    def _found(
        query: Search,
        lo: int,
        hi: int,
        ordered: list[tuple[str, int]],
        records: list[JobRecord | None],
        more: bool,
    ) -> tuple[list[Found], bool]:
        out: list[Found] = []
        keyed = query.key is not None or query.idempotency_key is not None
        for (job_id, at_ms), record in zip(ordered, records, strict=True):
            if record is None or (query.state is not None and record.state != query.state):
                continue
            if record.at_ms != at_ms and not keyed:
                continue  # an entry of a state the job left (its current one is listed)
            if not lo <= record.at_ms <= hi:
                continue
            out.append(
                Found(job_id, record.state, record.at_ms, record.attempt, record.status,
                      record.error)
            )  # fmt: skip
            if len(out) == query.limit:
                return out, True
        return out, more

    async def trim(self, budget_bytes: int) -> int:
        """Forget the slices past the retention, then drop the oldest while over the budget.
        Several workers may do it at once: each step is idempotent."""
        k = self._keys
        oldest = self._buckets(time.time())[0]
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(k.attempt_bytes())
        (sizes,) = await self._run("attempt trim", pipe)
        buckets = sorted((int(b), int(n)) for b, n in sizes.items())
        gone = [b for b, _ in buckets if b < oldest]
        live = [(b, n) for b, n in buckets if b >= oldest]
        total = sum(n for _, n in live)
        dropped = 0
        while live and total > budget_bytes:
            b, n = live.pop(0)
            gone.append(b)
            total -= n
            dropped += n
        if not gone:
            return 0
        pipe = self._client.pipeline(transaction=False)
        for b in gone:
            for shard in range(SHARDS):
                pipe.unlink(k.attempts(b, shard))
            pipe.hdel(k.attempt_bytes(), str(b))
        await self._run("attempt trim", pipe)
        return dropped
