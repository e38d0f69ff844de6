"""Delayed jobs on Redis, part of the owner role (:class:`~emq.core.interfaces.GroupOwner`):
park retries, promote due jobs into their queues, and keep the due index that tells the workers
which groups hold a due job.

A group's delayed set holds ``<priority>|<payload>`` members scored by due epoch milliseconds
(see :mod:`adapters.redis_queue.lua`); the global due index (outside every hash tag) holds, per
group, the earliest due time of its set or an earlier one (a stale entry is harmless:
:meth:`RedisDelayed.reindex_delayed` refreshes it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from adapters.redis_queue.base import RedisQueueBase
from adapters.redis_queue.lua import FENCE, STREAMS
from adapters.redis_replies import Command, Hints, next_score, score_pairs, text
from emq.core.interfaces import Scheduled
from emq.core.model import GroupRef

log = logging.getLogger(__name__)

# KEYS: delayed, high, medium, low, job_due  ARGV: now_ms, limit -> how many were moved
# (a promoted job's due time leaves job_due: its id is the payload's first field)
PROMOTE_DUE = (
    STREAMS
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local moved = 0
for _, member in ipairs(due) do
  local bar = string.find(member, '|', 1, true)
  local stream = bar and streams[string.sub(member, 1, bar - 1)]
  if stream then
    redis.call('XADD', stream, '*', 'd', string.sub(member, bar + 1))
    redis.call('ZREM', KEYS[1], member)
    local id = string.match(member, '^[a-z]+|{"id":"([^"]+)"')
    if id and KEYS[5] then redis.call('HDEL', KEYS[5], id) end
    moved = moved + 1
  end
end
return moved
"""
)

# KEYS: delayed, job_due  ARGV: endpoint ('*': any), until_ms, now_ms -> how many made due now.
# A member's endpoint is its job URL's host:port, spelled as emq.core.endpoints.endpoint_of
# spells it (lower case, the scheme's port when none is given); a job with a due time of its
# own (in job_due: put with delay_s) is left alone.
RELEASE_DEFERRED = """
local released = 0
local ports = {http = '80', https = '443'}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])) do
  local url = string.match(member, '"job":{"url":"([^"]*)"')
  local id = string.match(member, '^[a-z]+|{"id":"([^"]+)"')
  if url and not (id and redis.call('HEXISTS', KEYS[2], id) == 1) then
    local scheme, rest = string.match(url, '^([^:/]+)://(.*)$')
    if scheme then
      local netloc = string.lower(string.match(rest, '^[^/?#]*'))
      netloc = string.match(netloc, '[^@]*$')
      if string.sub(netloc, -1) == ']' or not string.find(netloc, ':', 1, true) then
        netloc = netloc .. ':' .. (ports[string.lower(scheme)] or '80')
      end
      if ARGV[1] == '*' or netloc == ARGV[1] then
        redis.call('ZADD', KEYS[1], ARGV[3], member)
        released = released + 1
      end
    end
  end
end
return released
"""

# KEYS: delayed, epoch  ARGV: epoch, then (due_ms, member) per job -> {0, current} fenced |
# {1, parked}. A member already parked keeps one entry (ZADD moves it to the new due time), so
# re-sending a schedule that failed half-way parks nothing twice.
SCHEDULE = (
    FENCE
    + """
local current = fenced(KEYS[2], ARGV[1])
if current then return {0, current} end
local n = 0
for i = 2, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
  n = n + 1
end
return {1, n}
"""
)

# KEYS: delayed sets (of one slot)  ARGV: -  -> per set, the due time of its earliest job as a
# string, or '' when it is empty. In Lua so the members (whole payloads) never cross the network.
EARLIEST_DUE = """
local out = {}
for i = 1, #KEYS do
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  out[i] = first[2] or ''
end
return out
"""


class RedisDelayed(RedisQueueBase):
    """Park, promote and index a group's delayed jobs."""

    def _register_scripts(self) -> None:
        super()._register_scripts()
        self._promote = self._script(PROMOTE_DUE)
        self._schedule = self._script(SCHEDULE)
        self._release = self._script(RELEASE_DEFERRED)
        self._earliest = self._script(EARLIEST_DUE)

    async def promote_due(self, group: GroupRef, now_ms: int, limit: int) -> int:
        if limit <= 0:
            return 0
        keys = (self._keys.delayed(group), *self._group_streams(group), self._keys.job_due(group))
        moved = await self._call(self._eval(self._promote, keys, (now_ms, limit)), "promote_due")
        if moved:
            log.debug("promoted %d due jobs of %s", moved, group)
            await self._send_hints(Hints.ready_of(group), "promote_due")
        return int(moved)

    async def release_deferred(
        self, group: GroupRef, endpoint: str, until_ms: int, now_ms: int
    ) -> int:
        keys = (self._keys.delayed(group), self._keys.job_due(group))
        args = (endpoint, until_ms, now_ms)
        released = await self._call(self._eval(self._release, keys, args), "release_deferred")
        if released:
            hints = Hints()
            hints.add(str(group), now_ms)
            await self._send_hints(hints, "release_deferred")
        return int(released)

    async def schedule(self, group: GroupRef, epoch: int, items: Sequence[Scheduled]) -> None:
        """Park ``items`` in the group's delayed set for the owner holding ``epoch``; index them.

        Raises :class:`Fenced` (parking and indexing nothing) if a newer owner claimed the group.
        Re-sending a schedule parks nothing twice (a member is unique in the set). The due-index
        update follows the parking, so the index never announces a job that is not there yet.
        """
        args: list[Any] = [epoch]
        for job in items:
            args += (int(job.due_ms), job.priority.value.encode() + b"|" + job.payload)
        keys = (self._keys.delayed(group), self._keys.epoch(group))
        reply = await self._call(self._eval(self._schedule, keys, args), "schedule")
        self._fenced_result(reply, group, epoch, "schedule")
        if items:
            hints = Hints()
            hints.add(str(group), min(int(job.due_ms) for job in items))
            await self._send_hints(hints, "schedule")

    async def due_groups(self, now_ms: int, limit: int) -> list[str]:
        """Names (``str(GroupRef)``) of groups whose delayed set may hold a job due at ``now_ms``.

        Earliest first, at most ``limit``. From the due index: a name may be listed although its
        job was promoted already (promote_due then moves nothing; reindex_delayed clears it).
        """
        if limit <= 0:
            return []
        command = ("ZRANGEBYSCORE", self._keys.due_index(), "-inf", int(now_ms), "LIMIT", 0, limit)
        return [text(name) for name in await self._call(command, "due_groups")]

    async def due_scan(self, now_ms: int, limit: int) -> tuple[list[str], int | None]:
        """:meth:`due_groups`, and the earliest index entry after ``now_ms`` (one round trip)."""
        index = self._keys.due_index()
        commands: list[Command] = [
            ("ZRANGEBYSCORE", index, "-inf", int(now_ms), "LIMIT", 0, max(0, limit)),
            ("ZRANGEBYSCORE", index, f"({int(now_ms)}", "+inf", "WITHSCORES", "LIMIT", 0, 1),
        ]
        due, later = await self._pipeline(commands, "due_groups")
        names = [text(name) for name in due] if limit > 0 else []
        return names, next_score(later)

    async def reindex_delayed(self, groups: Sequence[GroupRef]) -> None:
        """Set the due-index entries of ``groups`` to their earliest delayed job (or remove them).

        Three pipelined round trips: read the earliest due times, write them, read them again.
        A job parked between the first read and the write may have had its (earlier) index
        entry overwritten; it was parked before its own index update, so the second read sees
        it and ZADD LT puts the earlier time back. The index thus never runs late.
        """
        unique = list(dict.fromkeys(groups))
        if not unique:
            return
        names = [str(g) for g in unique]
        index = self._reindex_key()
        earliest = dict(zip(names, await self._earliest_due(unique), strict=True))
        found = {name: due for name, due in earliest.items() if due is not None}
        gone = [name for name, due in earliest.items() if due is None]
        commands: list[Command] = []
        if found:
            commands.append(("ZADD", index, *score_pairs(found)))
        if gone:
            commands.append(("ZREM", index, *gone))
        await self._pipeline(commands, "reindex_delayed")
        again = zip(names, await self._earliest_due(unique), strict=True)
        missed = {n: due for n, due in again if due is not None and due < found.get(n, due + 1)}
        if missed:
            await self._pipeline([("ZADD", index, "LT", *score_pairs(missed))], "reindex_delayed")

    async def _earliest_due(self, groups: Sequence[GroupRef]) -> list[int | None]:
        """For each group, the due time of its earliest delayed job (None if there is none)."""
        delayed = [self._keys.delayed(g) for g in groups]
        chunks = self._per_slot(range(len(groups)), lambda i: self._slot(delayed[i]))
        commands = [self._eval(self._earliest, [delayed[i] for i in chunk], ()) for chunk in chunks]
        out: list[int | None] = [None] * len(groups)
        replies = await self._pipeline(commands, "reindex_delayed")
        for chunk, reply in zip(chunks, replies, strict=True):
            for i, score in zip(chunk, reply, strict=True):
                out[i] = int(float(score)) if score else None
        return out
