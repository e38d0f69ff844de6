"""The owner role on Redis (:class:`~emq.core.interfaces.GroupOwner`), what a worker needs: claim
and fence groups, read queues, commit checkpoints, trim, and learn which groups got work.
(Delayed jobs and dead letters, the owner's other writes, are in
:mod:`~adapters.redis_queue.delayed` and :mod:`~adapters.redis_queue.dead_letters`.)

Every write carries the owner's epoch and is refused inside the script that would write once a
newer owner claimed the group. The batch scripts (READ, WRITE_CHECKPOINTS, TRIM_MANY) take many
groups of one Cluster slot per call: a worker owning 10 000 queues reads and commits them in a
few commands. Ready signals are read by XREAD BLOCK on the dedicated blocking client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.commands.core import AsyncScript

from adapters.redis_queue import hold_check
from adapters.redis_queue.base import RedisQueueBase
from adapters.redis_queue.lua import FENCE, OFFSETS
from adapters.redis_replies import (
    BatchItem,
    counts_of,
    cursor_of,
    entries_of,
    offset_of,
    ready_names,
    text,
)
from emq.core.errors import Fenced
from emq.core.interfaces import Checkpoint, Claimed, Entry, Offset
from emq.core.model import GroupRef, QueueRef

_READ_QUEUES = 128  # queues per READ script (each up to a fetch's count of entries)
_BLOCK_GRACE_S = 2.0  # a blocking read not answered this long after its BLOCK time: server hung

# KEYS: streams  ARGV: per stream, the offset to read after and its count
# -> per stream, its next (up to its count) entries as one flat array: offset, payload, offset, ...
# (a payload is false if an entry has no field 'd'). XRANGE for many queues in one call: a
# fetch of 10 000 queues costs a few commands instead of 10 000, and the flat reply is much
# cheaper for redis-py to take apart than XRANGE's (offset, {field: value}) pairs.
READ = """
local out = {}
for i = 1, #KEYS do
  local flat = {}
  local entries = redis.call('XRANGE', KEYS[i], '(' .. ARGV[2 * i - 1], '+', 'COUNT', ARGV[2 * i])
  for _, entry in ipairs(entries) do
    local fields, payload = entry[2], false
    for f = 1, #fields, 2 do
      if fields[f] == 'd' then payload = fields[f + 1] end
    end
    flat[#flat + 1] = entry[1]
    flat[#flat + 1] = payload
  end
  out[i] = flat
end
return out
"""


# KEYS: streams  ARGV: an offset per stream -> the (1-based) indexes of the streams with an entry
# after their offset: the newest entry only, nothing else of it (RedisOwner.unread).
UNREAD = """
local out = {}
for i = 1, #KEYS do
  if #redis.call('XREVRANGE', KEYS[i], '+', '(' .. ARGV[i], 'COUNT', 1) > 0 then
    out[#out + 1] = i
  end
end
return out
"""
_UNREAD_QUEUES = 1024  # queues per UNREAD script (the reply is a few integers)


# Seconds a holder's taken stamp lives after the last claim that took a group from it: a
# crashed process's stamp goes eventually; a live one rereads a vanished stamp in full.
TAKEN_TTL_S = 7 * 86_400

# KEYS: epoch, holder  ARGV: epoch, holder, taken prefix
# -> {0, current} fenced | {1, previous holder or ''}
# The holder is the claiming worker process; it deletes it when it lets go cleanly (RELEASE_HOLDS),
# so a claim that finds another one knows its former holder may still push. A claim that changes
# what the former holder's hold check would answer (another holder, or a newer epoch) stamps the
# former holder's ``taken`` key, in the same script: its next check then sees the stamp moved and
# reads its groups in full (RedisOwner.check_holds). A claim that finds no holder stamps nothing:
# the former holder released the group and touches it no more. The stamp is the server's time in
# microseconds, and always above the one it replaces: it never takes a value again, even after its
# key expired (a counter would: after a restart that lost the last second of writes, the next claim
# would count to a value a holder already read). That key is built here from the holder found, so it
# is done on a standalone server only: a Cluster's claim is sent an empty prefix (its holds are
# checked in full every time), since the key would sit on another slot.
CLAIM = (
    FENCE
    + """
local current = fenced(KEYS[1], ARGV[1])
if current then return {0, current} end
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('SET', KEYS[1], ARGV[1])
local previous = redis.call('GET', KEYS[2]) or ''
if ARGV[2] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[2]) end
if ARGV[3] ~= '' and previous ~= '' and (previous ~= ARGV[2] or tonumber(ARGV[1]) > before) then
  local taken = ARGV[3] .. previous
  local t = redis.call('TIME')
  local stamp = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', taken) or '0') or 0
  if stamp <= last then stamp = last + 1 end
  redis.call('SET', taken, string.format('%d', stamp), 'EX', """
    + str(TAKEN_TTL_S)
    + """)
end
return {1, previous}
"""
)

# KEYS: holders  ARGV: holder -> how many were released (the ones ``holder`` still held)
RELEASE_HOLDS = """
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""

# commit(checkpoint_key, epoch_key, stream_key, epoch, offset)
# -> {0, current} fenced | {1, entries newly committed}
# Counts the entries in (old, new] in pages so the count is exact however far the offset moved;
# a commit normally covers about a second of a <= 150 QPS queue.
_COMMIT = (
    FENCE
    + OFFSETS
    + """
local function commit(ckpt_key, epoch_key, stream_key, epoch, offset)
  local current = fenced(epoch_key, epoch)
  if current then return {0, current} end
  local old = redis.call('HMGET', ckpt_key, 'o', 'n')
  local from = '-'
  if old[1] then
    local ms, seq = split_id(old[1])
    local new_ms, new_seq = split_id(offset)
    if new_ms < ms or (new_ms == ms and new_seq <= seq) then return {1, 0} end
    from = '(' .. old[1]
  end
  local counted = 0
  while true do
    local page = redis.call('XRANGE', stream_key, from, offset, 'COUNT', 1000)
    counted = counted + #page
    if #page < 1000 then break end
    from = '(' .. page[#page][1]
  end
  local total = (tonumber(old[2]) or 0) + counted
  redis.call('HSET', ckpt_key, 'o', offset, 'e', epoch, 'n', string.format('%d', total))
  return {1, counted}
end
"""
)

# KEYS: (stream, checkpoint, epoch) per item, all of one slot  ARGV: one string, a line
# "<epoch> <offset>" per item (one argument instead of two per item: redis-py packs each
# argument in Python) -> the 1-based numbers of the items that were fenced (and changed
# nothing); the others are applied.
WRITE_CHECKPOINTS = (
    _COMMIT
    + """
local refused = {}
local i = 0
for epoch, offset in string.gmatch(ARGV[1], '(%S+) (%S+)') do
  local k = 3 * i
  i = i + 1
  local done = commit(KEYS[k + 2], KEYS[k + 3], KEYS[k + 1], epoch, offset)
  if done[1] == 0 then refused[#refused + 1] = i end
end
return refused
"""
)

# cut(stream_key, checkpoint_key, epoch_key, epoch, retain) -> {0, current} fenced | {1, removed}
# Only entries at or below the checkpoint go, and of those the newest ``retain`` stay: the
# exact (not ``~``) MINID is the oldest entry to keep, or the id right after the checkpoint.
_CUT = (
    FENCE
    + OFFSETS
    + """
local function cut(stream_key, ckpt_key, epoch_key, epoch, retain_arg)
  local current = fenced(epoch_key, epoch)
  if current then return {0, current} end
  local committed = redis.call('HGET', ckpt_key, 'o')
  if not committed then return {1, 0} end
  local retain = tonumber(retain_arg)
  local minid = id_after(committed)
  if retain > 0 then
    local kept = redis.call('XREVRANGE', stream_key, committed, '-', 'COUNT', retain)
    if #kept < retain then return {1, 0} end
    minid = kept[#kept][1]
  end
  return {1, redis.call('XTRIM', stream_key, 'MINID', '=', minid)}
end
"""
)

# KEYS: (stream, checkpoint, epoch) per item, all of one slot  ARGV: one string, a line
# "<epoch> <retain>" per item -> the 1-based numbers of the items that were fenced (and
# changed nothing); the others are applied.
TRIM_MANY = (
    _CUT
    + """
local refused = {}
local i = 0
for epoch, retain in string.gmatch(ARGV[1], '(%S+) (%S+)') do
  local k = 3 * i
  i = i + 1
  local done = cut(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], epoch, retain)
  if done[1] == 0 then refused[#refused + 1] = i end
end
return refused
"""
)


# KEYS: (stream, checkpoint, epoch) per item, all of one slot  ARGV: one string, a line
# "<epoch> <offset> <offset> ..." per item -> the 1-based numbers of the items that were fenced
# (and changed nothing). The others: each listed entry above the checkpoint is deleted and the
# deleted are counted as committed (``n``: the backlog is entries-added less ``n``); one at or
# below it is left to the trim (it is counted already).
FORGET_MANY = (
    FENCE
    + OFFSETS
    + """
local function above(id, committed)
  if not committed then return true end
  local ms, seq = split_id(id)
  local cms, cseq = split_id(committed)
  return ms > cms or (ms == cms and seq > cseq)
end
local refused = {}
local i = 0
for line in string.gmatch(ARGV[1], '[^\\n]+') do
  local k = 3 * i
  i = i + 1
  local epoch
  local ids = {}
  for word in string.gmatch(line, '%S+') do
    if epoch then ids[#ids + 1] = word else epoch = word end
  end
  if fenced(KEYS[k + 3], epoch) then
    refused[#refused + 1] = i
  else
    local committed = redis.call('HGET', KEYS[k + 2], 'o')
    local gone = 0
    for _, id in ipairs(ids) do
      if above(id, committed) then gone = gone + redis.call('XDEL', KEYS[k + 1], id) end
    end
    if gone > 0 then redis.call('HINCRBY', KEYS[k + 2], 'n', gone) end
  end
end
return refused
"""
)


class RedisOwner(RedisQueueBase):
    """Claim, read, commit and trim the groups a worker owns; wait for ready signals."""

    _hold_check: hold_check.HoldCheck | None = None  # the last check_holds', for the next

    def _register_scripts(self) -> None:
        super()._register_scripts()
        self._read = self._script(READ)
        self._claim = self._script(CLAIM)
        self._release_holds = self._script(RELEASE_HOLDS)
        self._write_checkpoints = self._script(WRITE_CHECKPOINTS)
        self._trim_many = self._script(TRIM_MANY)
        self._forget_many = self._script(FORGET_MANY)
        self._unread = self._script(UNREAD)
        # The claims' taken stamps (see CLAIM): on a standalone server only.
        self._taken_prefix = "" if self._cluster else self._keys.taken("")

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        """One READ script per Cluster slot and :data:`_READ_QUEUES` queues (see the script)."""
        counts = counts_of(requests, count)
        chunks = self._per_slot(counts, lambda q: self._queue_keys(q).slot, _READ_QUEUES)
        commands = [
            self._eval(
                self._read,
                [self._queue_keys(q).stream for q in chunk],
                tuple(a for q in chunk for a in (str(requests[q]), counts[q])),
            )
            for chunk in chunks
        ]
        if not commands:
            return {}
        replies = await self._pipeline(commands, "read")
        out: dict[QueueRef, list[Entry]] = {}
        for chunk, reply in zip(chunks, replies, strict=True):
            for queue, flat in zip(chunk, reply, strict=True):
                if flat:
                    out[queue] = entries_of(queue, flat)
        return out

    async def unread(self, after: Mapping[QueueRef, Offset]) -> set[QueueRef]:
        """One UNREAD script per Cluster slot and :data:`_UNREAD_QUEUES` queues: a sweep of
        10 000 idle queues answers a few bytes, where a read of one entry each cost the worker
        ~12 us a queue in replies and bookkeeping."""
        chunks = self._per_slot(after, lambda q: self._queue_keys(q).slot, _UNREAD_QUEUES)
        commands = [
            self._eval(
                self._unread,
                [self._queue_keys(q).stream for q in chunk],
                tuple(str(after[q]) for q in chunk),
            )
            for chunk in chunks
        ]
        if not commands:
            return set()
        replies = await self._pipeline(commands, "unread")
        return {
            chunk[int(i) - 1] for chunk, reply in zip(chunks, replies, strict=True) for i in reply
        }

    async def claim(self, group: GroupRef, epoch: int, holder: str = "") -> bool:
        keys = (self._keys.epoch(group), self._keys.holder(group))
        args = (epoch, holder, self._taken_prefix)
        reply = await self._call(self._eval(self._claim, keys, args), "claim")
        previous = text(self._fenced_result(reply, group, epoch, "claim"))
        return previous not in ("", holder)

    async def claim_groups(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str
    ) -> list[Claimed | Fenced]:
        """Each group's claim and then its three checkpoint reads, all in one pipeline (in
        order on the server: each read sees its group's claim applied). A claim sent twice
        (a broken connection) is harmless: the second finds this holder already."""
        commands: list[Any] = []
        for group, epoch in groups:
            keys = (self._keys.epoch(group), self._keys.holder(group))
            commands.append(self._eval(self._claim, keys, (epoch, holder, self._taken_prefix)))
            commands += [("HMGET", self._keys.checkpoint(q), "o", "e") for q in group.queues()]
        replies = await self._pipeline(commands, "claim")
        out: list[Claimed | Fenced] = []
        for n, (group, epoch) in enumerate(groups):
            reply, *checkpoints = replies[4 * n : 4 * n + 4]
            try:
                previous = text(self._fenced_result(reply, group, epoch, "claim"))
            except Fenced as e:
                out.append(e)
                continue
            read = [_checkpoint(offset, e) for offset, e in checkpoints]
            out.append((previous not in ("", holder), read))
        return out

    async def release_holds(self, groups: Sequence[GroupRef], holder: str) -> None:
        holders = [self._keys.holder(g) for g in groups]
        chunks = self._per_slot(holders, self._slot)
        commands = [self._eval(self._release_holds, chunk, (holder,)) for chunk in chunks]
        await self._pipeline(commands, "release_holds")

    async def check_holds(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str, full: bool = True
    ) -> set[GroupRef]:
        """One MGET of the groups' holder and epoch keys (per Cluster slot, pipelined), built
        once per set of groups and sent packed (:mod:`adapters.redis_queue.hold_check`).

        On a standalone server, with ``full=False``, first only the holder's taken stamp: the
        MGETs are sent only if a claim moved it since the last clean full check (see
        :mod:`~adapters.redis_queue.hold_check`). On a Cluster every check is full: the claims
        stamp nothing there (see CLAIM)."""
        holds, wanted = tuple(groups), holder.encode()
        check = self._hold_check
        if check is None or not check.fits(holds, wanted):
            taken = None if self._cluster else self._keys.taken(holder).encode()
            check = self._hold_check = hold_check.build(
                holds, wanted, self._hold_keys, self._per_slot, self._slot, self._cluster, taken
            )
        if not check.chunks:
            return set()
        if self._cluster:  # (a Cluster pipeline routes each MGET to its slot's node)
            return check.lost(await self._pipeline(check.commands, "check_holds"))
        if not full and check.trusted:
            (stamp,) = await self._calls.packed(check.probe, 1, "check_holds")
            if check.unchanged(stamp):
                return set()
        replies = len(check.chunks) + 1
        stamp, *mgets = await self._calls.packed(check.packed, replies, "check_holds")
        lost = check.lost(mgets)
        check.settle(stamp, lost)
        return lost

    def _hold_keys(self, group: GroupRef) -> tuple[str, str]:
        """The holder and epoch keys of ``group`` (spelled only when a hold check is built)."""
        return self._keys.holder(group), self._keys.epoch(group)

    async def read_checkpoint(self, queue: QueueRef) -> Checkpoint | None:
        return (await self.read_checkpoints([queue]))[0]

    async def read_checkpoints(self, queues: Sequence[QueueRef]) -> list[Checkpoint | None]:
        """One pipelined HMGET per queue, in one round trip."""
        commands = [("HMGET", self._keys.checkpoint(q), "o", "e") for q in queues]
        replies = await self._pipeline(commands, "read_checkpoint")
        return [_checkpoint(offset, epoch) for offset, epoch in replies]

    async def tails(self, queues: Sequence[QueueRef]) -> list[Offset | None]:
        """One pipelined XREVRANGE of one entry per queue, in one round trip."""
        commands = [("XREVRANGE", self._keys.stream(q), "+", "-", "COUNT", 1) for q in queues]
        replies = await self._pipeline(commands, "tails")
        return [offset_of(reply[0][0]) if reply else None for reply in replies]

    async def write_checkpoints(
        self, items: Sequence[tuple[QueueRef, Offset, int]]
    ) -> set[GroupRef]:
        """Many checkpoint writes, (queue, offset, epoch) each, in one round trip.

        One WRITE_CHECKPOINTS script per Cluster slot and 500 items, its arguments packed in one
        string: redis-py spends ~20 us of Python per pipelined command and ~1 us per argument,
        so 3000 EVALSHAs would cost far more than their work. Returns the groups with a fenced
        item (those items changed nothing); never raises Fenced.
        """
        batch = [(q.group, self._queue_keys(q), f"{e} {o}") for q, o, e in items]
        return await self._fenced_batch(self._write_checkpoints, batch, "write_checkpoints")

    async def forget_finished(
        self, items: Sequence[tuple[QueueRef, int, Sequence[Offset]]]
    ) -> set[GroupRef]:
        """Many removals of entries finished above the checkpoint, (queue, epoch, offsets)
        each, in one round trip (FORGET_MANY per Cluster slot). Returns the groups with a fenced
        item (those items removed nothing); never raises Fenced."""
        batch = [
            (q.group, self._queue_keys(q), " ".join([str(e), *map(str, offsets)]))
            for q, e, offsets in items
            if offsets
        ]
        if not batch:
            return set()
        return await self._fenced_batch(self._forget_many, batch, "forget_finished")

    async def trim_many(self, items: Sequence[tuple[QueueRef, int, int]]) -> set[GroupRef]:
        """Many trims, (queue, epoch, retain) each, in one round trip.

        Returns the groups with a fenced item (those items trimmed nothing); never raises Fenced.
        """
        batch = [(q.group, self._queue_keys(q), f"{e} {max(0, r)}") for q, e, r in items]
        return await self._fenced_batch(self._trim_many, batch, "trim_many")

    async def _fenced_batch(
        self, script: AsyncScript, batch: Sequence[BatchItem], what: str
    ) -> set[GroupRef]:
        """Run ``script`` over ``batch`` per slot; the groups of the items it reports fenced."""
        chunks = self._per_slot(batch, lambda item: item[1].slot)
        commands = [
            self._eval(
                script,
                [key for _, keys, _ in chunk for key in keys[:3]],
                ("\n".join(args for _, _, args in chunk),),
            )
            for chunk in chunks
        ]
        replies = await self._pipeline(commands, what)
        return {
            chunk[int(n) - 1][0]
            for chunk, reply in zip(chunks, replies, strict=True)
            for n in reply
        }

    async def wait_ready(
        self, cursor: str | None, timeout_s: float, count: int = 10_000
    ) -> tuple[str, list[str]]:
        """Wait up to ``timeout_s`` for ready signals after ``cursor``; (new cursor, group names).

        ``cursor=None`` means "signals from now on" and is resolved to the newest signal's id,
        so a signal made before the next call is never lost. Names are ``str(GroupRef)``,
        deduplicated, in signal order, from at most ``count`` signals. On timeout the names are
        empty and the cursor is the (resolved) one given. A worker more than ~READY_MAXLEN
        signals behind misses the trimmed ones: signals are hints, its sweep covers them.
        """
        key = self._keys.ready()

        async def read(block: int | None) -> tuple[str, Any]:
            after = await self._ready_tail(key) if cursor is None else cursor_of(cursor)
            return after, await self._blocking.xread({key: after}, max(1, count), block)

        after, reply = await self._blocking_read(key, timeout_s, _BLOCK_GRACE_S, read)
        last, names, due = ready_names(reply, after)
        self._read_due(due)
        return last, names

    async def _ready_tail(self, key: str) -> str:
        """The newest signal's id, or ``0-0`` if none: every later signal sorts after it."""
        newest: Any = await self._blocking.xrevrange(key, "+", "-", 1)
        return text(newest[0][0]) if newest else "0-0"


def _checkpoint(offset: Any, epoch: Any) -> Checkpoint | None:
    """A checkpoint hash's ``o`` and ``e`` fields as read (None: never committed)."""
    return None if offset is None else Checkpoint(offset_of(offset), int(epoch))
