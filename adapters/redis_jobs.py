"""Job records, group snapshots and the per-job lookup on Redis (:class:`JobStore`).

Keys:

* ``job_records(bucket, shard)``: hash job id -> its latest outcome (JSON, see
  :class:`~emq.core.jobs.JobRecord`). ``bucket`` is ``now // ttl``; ``shard`` one of
  :data:`SHARDS` by the job id, so a worker's flush is a few commands however many groups it
  serves, and a Cluster spreads the records over several nodes. A hash expires at the end of
  the next bucket: a record stays readable at least ``ttl`` and less than ``2 * ttl`` seconds,
  and memory is about (outcomes per second) x ``2 * ttl`` x ~100 bytes (~150 for a delivery,
  whose record holds its attempt: emq.core.attempts).
* ``group_snapshots()``: hash group -> the owner's latest :class:`~emq.core.jobs.GroupSnapshot`
  (JSON with its time; one older than a few seconds is ignored). Written once a second in one
  command with every group that has work; one field per group, so bounded by the groups.
* ``job_due(group)``: hash job id -> due time of a job parked with ``delay_s`` (written by the
  queue's PUT script, removed by its promotion).

A lookup reads the job's records and its group's snapshot (one pipelined round trip), then runs
:data:`FIND` on its group's keys: the due time, and (unless the job is parked or finished for
good) looks for the job's entry in its queue from the time its id
carries (or its last retry's due time): an XRANGE walk over the entries appended since then
(forward first: a job is appended right after its id is made), at most :data:`SCAN_CAP`
entries, never a scan of the whole queue. Jobs ahead of it are counted exactly up to
:data:`AHEAD_CAP` entries of its own queue plus the backlog of the higher priorities.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_attempts import (
    ATTEMPT_LOG_MAX_BYTES,
    RedisAttemptStore,
    add_writes,
    run_pipeline,
)
from adapters.redis_conn import OwnedClient, translated
from emq.core.attempts import AttemptWrite, IndexWrite
from emq.core.jobs import GroupSnapshot, JobFacts, JobPlace, JobRecord, JobStore
from emq.core.model import PRIORITIES, GroupRef, QueueRef
from emq.core.naming import RedisKeys

SHARDS = 16  # record hashes per bucket
AHEAD_CAP = 10_000  # entries counted one by one in the job's own queue; beyond, an estimate
SCAN_CAP = 50_000  # entries a lookup may walk (a job behind more, in its window: not found)
BEFORE_MS = 2_000  # clock skew allowed between the API that made the id and Redis

# KEYS: stream, checkpoint, job_due, then (stream, checkpoint) of each higher priority
# ARGV: job id, search from (ms), before_ms, ahead_cap, scan_cap, skip ('1': finished for good)
# -> {due, committed, offset, ahead, exact, data (the entry's, where found)}
FIND = """
local id = ARGV[1]
local prefix = '{"id":"' .. id .. '"'
local due = redis.call('HGET', KEYS[3], id) or false
local committed = redis.call('HGET', KEYS[2], 'o') or false
local since = tonumber(ARGV[2])
local final = ARGV[6] == '1'
local budget = tonumber(ARGV[5])
local function search(from, to, reverse)
  while budget > 0 do
    local page
    if reverse then page = redis.call('XREVRANGE', KEYS[1], to, from, 'COUNT', 500)
    else page = redis.call('XRANGE', KEYS[1], from, to, 'COUNT', 500) end
    for _, e in ipairs(page) do
      local f = e[2]
      for i = 1, #f, 2 do
        if f[i] == 'd' and string.sub(f[i + 1], 1, #prefix) == prefix then return e[1], f[i + 1] end
      end
    end
    budget = budget - #page
    if #page < 500 then return false end
    if reverse then to = '(' .. page[#page][1] else from = '(' .. page[#page][1] end
  end
  return false
end
local offset, data = false, false
if not due and not final and redis.call('EXISTS', KEYS[1]) == 1 then
  offset, data = search(string.format('%d', since), '+', false)
  if not offset then
    local lo = string.format('%d', since - tonumber(ARGV[3]))
    offset, data = search(lo, '(' .. string.format('%d', since), true)
  end
end
local ahead, exact = 0, 1
if offset then
  local from = committed and ('(' .. committed) or '-'
  local cap = tonumber(ARGV[4])
  local before = redis.call('XRANGE', KEYS[1], from, '(' .. offset, 'COUNT', cap)
  ahead = #before
  if #before >= cap then exact = 0 end
  for i = 4, #KEYS, 2 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      local info = redis.call('XINFO', 'STREAM', KEYS[i])
      for k = 1, #info, 2 do
        if info[k] == 'entries-added' then
          local n = info[k + 1] - tonumber(redis.call('HGET', KEYS[i + 1], 'n') or '0')
          if n > 0 then ahead = ahead + n end
        end
      end
    end
  end
end
return {due, committed, offset, ahead, exact, data or false}
"""


def _shard(job_id: str) -> int:
    """The record shard of a job id (its last characters are random)."""
    return zlib.crc32(job_id.encode()) % SHARDS


def _text(raw: Any) -> str | None:
    if raw is None or raw is False:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _url_of(data: Any) -> str | None:
    """The URL of a stored job (an envelope's JSON), or None if it cannot be read."""
    text = _text(data)
    try:
        url = json.loads(text)["job"]["url"] if text else None
    except (ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


def _latest(*raws: Any) -> JobRecord | None:
    """The newest of the records found (a job's later outcome supersedes its earlier one)."""
    best: JobRecord | None = None
    for raw in raws:
        text = _text(raw)
        if text is None:
            continue
        record = JobRecord.from_dict("", json.loads(text))
        if best is None or record.at_ms >= best.at_ms:
            best = record
    return best


class RedisJobStore(OwnedClient, JobStore):
    """:class:`JobStore` on its own client (``owns_client``: :meth:`aclose` closes it)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        ttl_s: int = 600,
        owns_client: bool = False,
        attempt_budget_bytes: int = ATTEMPT_LOG_MAX_BYTES,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys
        self.ttl_s = ttl_s
        self._find = client.register_script(FIND)
        self.attempt_budget_bytes = attempt_budget_bytes
        self.attempt_store = RedisAttemptStore(client, keys, ttl_s, self.latest)

    def _bucket(self, now_s: float) -> int:
        return int(now_s // self.ttl_s)

    async def _run(self, what: str, pipe: Any) -> list[Any]:
        return await run_pipeline(what, pipe)

    async def latest(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """The latest record of each job (None: none retained); one round trip."""
        if not job_ids or self.ttl_s <= 0:
            return [None] * len(job_ids)
        bucket = self._bucket(time.time())
        pipe = self._client.pipeline(transaction=False)
        for job_id in job_ids:
            shard = _shard(job_id)
            pipe.hget(self._keys.job_records(bucket, shard), job_id)
            pipe.hget(self._keys.job_records(bucket - 1, shard), job_id)
        replies = await self._run("job records", pipe)
        return [_latest(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]

    async def trim_attempts(self) -> None:
        await self.attempt_store.trim(self.attempt_budget_bytes)

    async def record(
        self,
        records: Sequence[tuple[str, bytes]],
        attempts: Sequence[AttemptWrite] = (),
        index: Sequence[IndexWrite] = (),
        delivered: Sequence[tuple[QueueRef, int, bytes]] = (),
    ) -> None:
        if not (records or delivered) or self.ttl_s <= 0:
            return
        now = time.time()
        bucket = self._bucket(now)
        expire_at = (bucket + 2) * self.ttl_s
        # One HSET's arguments per shard, built flat (a record per delivered job: no dict, no
        # copy of it into arguments); a job twice in a batch keeps its later record, as HSET
        # sets fields in order.
        shards: list[list[Any]] = [[] for _ in range(SHARDS)]
        crc32 = zlib.crc32
        for job_id, encoded in records:
            fields = shards[crc32(job_id.encode()) % SHARDS]  # (_shard, inline)
            fields.append(job_id)
            fields.append(encoded)
        pipe = self._client.pipeline(transaction=False)
        for shard, fields in enumerate(shards):
            if fields:
                key = self._keys.job_records(bucket, shard)
                pipe.execute_command("HSET", key, *fields)
                pipe.expireat(key, expire_at)
        add_writes(pipe, self._keys, self.ttl_s, now, attempts, index, delivered)
        await self._run("job records", pipe)

    async def publish(self, snapshots: Sequence[tuple[GroupRef, bytes]]) -> None:
        if not snapshots:
            return
        fields = {str(group): encoded for group, encoded in snapshots}
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._keys.group_snapshots(), mapping=fields)  # type: ignore[arg-type]
        await self._run("group snapshots", pipe)

    async def facts(self, group: GroupRef, place: JobPlace, job_id: str) -> JobFacts:
        k = self._keys
        bucket = self._bucket(time.time()) if self.ttl_s > 0 else 0
        shard = _shard(job_id)
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(k.job_records(bucket, shard), job_id)
        pipe.hget(k.job_records(bucket - 1, shard), job_id)
        pipe.hget(k.group_snapshots(), str(group))
        r1, r2, snap = await self._run("job lookup", pipe)
        record = _latest(r1, r2)
        since = place.enqueued_ms
        if record is not None and record.next_ms is not None:
            since = max(since, record.next_ms)  # a retry is appended again when it is due
        final = record is not None and record.state in ("delivered", "dead")
        queue = place.queue(group)
        keys = [k.stream(queue), k.checkpoint(queue), k.job_due(group)]
        for p in PRIORITIES[: place.priority.rank]:
            keys += (k.stream(group.queue(p)), k.checkpoint(group.queue(p)))
        args = (job_id, since, BEFORE_MS, AHEAD_CAP, SCAN_CAP, "1" if final else "0")
        with translated("job lookup"):
            reply = await self._find(keys=keys, args=args)
        due, committed, offset, ahead, exact, data = reply
        snap_text = _text(snap)
        return JobFacts(
            record=record,
            offset=_text(offset),
            committed=_text(committed),
            ahead=int(ahead),
            ahead_exact=bool(exact),
            due_ms=int(_text(due) or 0) or None,
            snapshot=GroupSnapshot.from_dict(json.loads(snap_text)) if snap_text else None,
            url=_url_of(data),
        )

    async def oldest_ms(self, queues: Sequence[QueueRef]) -> list[int | None]:
        """Two pipelined round trips of plain commands (each queue may live on another slot)."""
        if not queues:
            return []
        k = self._keys
        pipe = self._client.pipeline(transaction=False)
        for q in queues:
            pipe.hget(k.checkpoint(q), "o")
        committed = await self._run("oldest entries", pipe)
        pipe = self._client.pipeline(transaction=False)
        for q, ckpt in zip(queues, committed, strict=True):
            start = f"({_text(ckpt)}" if ckpt else "-"
            pipe.xrange(k.stream(q), start, "+", count=1)
        out: list[int | None] = []
        for entries in await self._run("oldest entries", pipe):
            first = _text(entries[0][0]) if entries else None
            out.append(int(first.partition("-")[0]) if first else None)
        return out
