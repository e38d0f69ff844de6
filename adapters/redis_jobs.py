"""Job records, group snapshots and the per-job lookup on Redis (:class:`JobStore`).

Keys (all of a group's carry its hash tag, so the lookup is one script on one Cluster slot):

* ``job_records(group, bucket)``: hash job id -> its latest outcome (JSON, see
  :class:`~emq.core.jobs.JobRecord`). ``bucket`` is ``now // ttl``; the hash expires at the end
  of the next bucket, so a record stays readable at least ``ttl`` and less than ``2 * ttl``
  seconds, and memory is about (outcomes per second) x ``2 * ttl`` x ~100 bytes.
* ``group_snapshot(group)``: the owner's latest :class:`~emq.core.jobs.GroupSnapshot` (JSON,
  expiring after :data:`SNAPSHOT_TTL_MS`: a group whose owner stopped talking has none).
* ``job_due(group)``: hash job id -> due time of a job parked with ``delay_s`` (written by the
  queue's PUT script, removed by its promotion).

The lookup (:data:`FIND`) reads the records, the due time and the snapshot, then (unless the job
is parked or finished for good) looks for the job's entry in its queue from the time its id
carries (or its last retry's due time): an XRANGE walk over the entries appended since then
(forward first: a job is appended right after its id is made), at most :data:`SCAN_CAP`
entries, never a scan of the whole queue. Jobs ahead of it are counted exactly up to
:data:`AHEAD_CAP` entries of its own queue plus the backlog of the higher priorities.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex

from emq.core.errors import BackendUnavailable
from emq.core.jobs import GroupSnapshot, JobFacts, JobPlace, JobRecord, JobStore
from emq.core.model import PRIORITIES, GroupRef, QueueRef
from emq.core.naming import RedisKeys

_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError)

SNAPSHOT_TTL_MS = 5_000  # a snapshot older than this is gone: the owner stopped talking
AHEAD_CAP = 10_000  # entries counted one by one in the job's own queue; beyond, an estimate
SCAN_CAP = 50_000  # entries a lookup may walk (a job behind more, in its window: not found)
BEFORE_MS = 2_000  # clock skew allowed between the API that made the id and Redis

# KEYS: stream, checkpoint, job_due, snapshot, records (this bucket), records (the one before),
#       then (stream, checkpoint) of each higher priority
# ARGV: job id, id's ms, before_ms, ahead_cap, scan_cap
# -> {record, record_before, due, snapshot, committed, offset, ahead, exact}
FIND = """
local id = ARGV[1]
local prefix = '{"id":"' .. id .. '"'
local r1 = redis.call('HGET', KEYS[5], id) or false
local r2 = redis.call('HGET', KEYS[6], id) or false
local due = redis.call('HGET', KEYS[3], id) or false
local snap = redis.call('GET', KEYS[4]) or false
local committed = redis.call('HGET', KEYS[2], 'o') or false
local since = tonumber(ARGV[2])
local final = false  -- delivered or dead, and no later retry: nothing to look for in the queue
local latest = -1
for _, r in ipairs({r1, r2}) do
  if r then
    local ok, rec = pcall(cjson.decode, r)
    if ok then
      if rec['next'] and tonumber(rec['next']) > since then since = tonumber(rec['next']) end
      if tonumber(rec['at']) >= latest then
        latest = tonumber(rec['at'])
        final = rec['s'] == 'delivered' or rec['s'] == 'dead'
      end
    end
  end
end
local budget = tonumber(ARGV[5])
local function search(from, to, reverse)
  while budget > 0 do
    local page
    if reverse then page = redis.call('XREVRANGE', KEYS[1], to, from, 'COUNT', 500)
    else page = redis.call('XRANGE', KEYS[1], from, to, 'COUNT', 500) end
    for _, e in ipairs(page) do
      local f = e[2]
      for i = 1, #f, 2 do
        if f[i] == 'd' and string.sub(f[i + 1], 1, #prefix) == prefix then return e[1] end
      end
    end
    budget = budget - #page
    if #page < 500 then return false end
    if reverse then to = '(' .. page[#page][1] else from = '(' .. page[#page][1] end
  end
  return false
end
local offset = false
if not due and not final and redis.call('EXISTS', KEYS[1]) == 1 then
  offset = search(string.format('%d', since), '+', false)
  if not offset then
    local lo = string.format('%d', since - tonumber(ARGV[3]))
    offset = search(lo, '(' .. string.format('%d', since), true)
  end
end
local ahead, exact = 0, 1
if offset then
  local from = committed and ('(' .. committed) or '-'
  local cap = tonumber(ARGV[4])
  local before = redis.call('XRANGE', KEYS[1], from, '(' .. offset, 'COUNT', cap)
  ahead = #before
  if #before >= cap then exact = 0 end
  for i = 7, #KEYS, 2 do
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
return {r1, r2, due, snap, committed, offset, ahead, exact}
"""


def _text(raw: Any) -> str | None:
    if raw is None or raw is False:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


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


class RedisJobStore(JobStore):
    """:class:`JobStore` on its own client (``owns_client``: :meth:`aclose` closes it)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        ttl_s: int = 600,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._keys = keys
        self.ttl_s = ttl_s
        self._owns = owns_client
        self._find = client.register_script(FIND)

    def _bucket(self, now_s: float) -> int:
        return int(now_s // self.ttl_s)

    async def _run(self, what: str, pipe: Any) -> list[Any]:
        try:
            replies: list[Any] = await pipe.execute()
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable during {what}: {e}") from e
        return replies

    async def record(self, records: Sequence[tuple[GroupRef, JobRecord]]) -> None:
        if not records or self.ttl_s <= 0:
            return
        bucket = self._bucket(time.time())
        expire_at = (bucket + 2) * self.ttl_s
        per_key: dict[str, dict[str, str]] = {}
        for group, record in records:
            key = self._keys.job_records(group, bucket)
            fields = per_key.setdefault(key, {})
            fields[record.job_id] = json.dumps(record.to_dict(), separators=(",", ":"))
        pipe = self._client.pipeline(transaction=False)
        for key, fields in per_key.items():
            pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
            pipe.expireat(key, expire_at)
        await self._run("job records", pipe)

    async def publish(self, snapshots: Sequence[tuple[GroupRef, GroupSnapshot]]) -> None:
        if not snapshots:
            return
        pipe = self._client.pipeline(transaction=False)
        for group, snap in snapshots:
            text = json.dumps(snap.to_dict(), separators=(",", ":"))
            pipe.set(self._keys.group_snapshot(group), text, px=SNAPSHOT_TTL_MS)
        await self._run("group snapshots", pipe)

    async def facts(self, group: GroupRef, place: JobPlace, job_id: str) -> JobFacts:
        k = self._keys
        bucket = self._bucket(time.time()) if self.ttl_s > 0 else 0
        queue = place.queue(group)
        keys = [
            k.stream(queue),
            k.checkpoint(queue),
            k.job_due(group),
            k.group_snapshot(group),
            k.job_records(group, bucket),
            k.job_records(group, bucket - 1),
        ]
        for p in PRIORITIES[: place.priority.rank]:
            keys += (k.stream(group.queue(p)), k.checkpoint(group.queue(p)))
        args = (job_id, place.enqueued_ms, BEFORE_MS, AHEAD_CAP, SCAN_CAP)
        try:
            reply = await self._find(keys=keys, args=args)
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable during job lookup: {e}") from e
        r1, r2, due, snap, committed, offset, ahead, exact = reply
        snap_text = _text(snap)
        return JobFacts(
            record=_latest(r1, r2),
            offset=_text(offset),
            committed=_text(committed),
            ahead=int(ahead),
            ahead_exact=bool(exact),
            due_ms=int(_text(due) or 0) or None,
            snapshot=GroupSnapshot.from_dict(json.loads(snap_text)) if snap_text else None,
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

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()
