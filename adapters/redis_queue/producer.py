"""The producer role on Redis (:class:`~emq.core.interfaces.JobProducer`): put, and count what
waits (backlog, delayed jobs). What the API needs.

A put sends its plain items as one APPEND script per Cluster slot (one in all on a standalone
server) rather than one XADD each: redis-py spends ~20 us of Python per pipelined command, which
would cap a 2-core API far below 30k jobs/s; jobs with an idempotency key or a due time take one
PUT script each. A put that fails half-way may have stored part of the batch; retrying it is
at-least-once (idempotency keys de-duplicate the retry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from adapters.redis_conn import check_acknowledged
from adapters.redis_queue.base import RedisQueueBase
from adapters.redis_replies import Append, Command, Hints, offset_of, put_result
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import PutItem, PutResult
from emq.core.model import GroupRef, QueueRef

_Slot: TypeAlias = tuple[int, int]

# KEYS: streams  ARGV: "k:n,k:n,...", payloads -> the new offsets, in the order of the pairs
# Appends many plain jobs, to one or many queues of one slot, in one call: a batch of 1000 puts
# costs a few commands instead of 1000 (redis-py spends ~20 us of Python per pipelined command).
# Job i goes to stream KEYS[k_i]; its payload is the next n_i bytes of ARGV[2] (all payloads
# concatenated: two arguments for the batch, see adapters.redis_replies.Append).
# What a failed put means: the write may have reached Redis (the connection broke after it was
# sent; on a Cluster, some shards took their part), so the jobs are possibly stored.
POSSIBLY_STORED = (
    "the jobs are possibly stored (some or all); retry with the same idempotency_key to "
    "avoid a duplicate"
)

APPEND = """
local ids = {}
local payloads = ARGV[2]
local at = 1
for k, n in string.gmatch(ARGV[1], '(%d+):(%d+)') do
  local stop = at + tonumber(n)
  local payload = string.sub(payloads, at, stop - 1)
  ids[#ids + 1] = redis.call('XADD', KEYS[tonumber(k)], '*', 'd', payload)
  at = stop
end
return ids
"""


# KEYS: stream, delayed, job_due[, idempotency]  ARGV: job_id, payload, due_ms or '', priority,
# window_s -> {0, offset} appended | {1, first_job_id} duplicate | {2, ''} parked in the delayed
# set (and its due time noted in job_due, so a status lookup finds it without a scan)
PUT = """
if #KEYS == 4 then
  -- SET NX GET (Redis >= 7.0): nil when the marker was set now, the first job id otherwise.
  local first = redis.call('SET', KEYS[4], ARGV[1], 'NX', 'GET', 'EX', ARGV[5])
  if first then return {1, first} end
end
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4] .. '|' .. ARGV[2])
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  return {2, ''}
end
return {0, redis.call('XADD', KEYS[1], '*', 'd', ARGV[2])}
"""


# KEYS: stream, checkpoint  ARGV: -  -> entries after the checkpoint
# ``entries-added`` (Redis >= 7.0) counts every XADD ever, trims and deletes included, and the
# checkpoint counts every entry committed, so their difference survives trimming. Run in Lua so
# the first/last entries XINFO returns never cross the network.
BACKLOG = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] break end
end
if not added then return redis.error_reply('EMQ needs Redis >= 7.0 (XINFO entries-added)') end
local backlog = added - tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
if backlog < 0 then return 0 end
return backlog
"""


class RedisProducer(RedisQueueBase):
    """Put jobs, and count a topic's waiting jobs."""

    def _register_scripts(self) -> None:
        super()._register_scripts()
        self._append = self._script(APPEND)
        self._put = self._script(PUT)
        self._backlog = self._script(BACKLOG)

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        """Store ``items``; then signal the groups appended to and index the delayed ones.

        The hints of items without an idempotency key are known before sending; those of the
        others wait for the replies, since a duplicate announces nothing.
        """
        commands, slots, hints = self._put_commands(items)
        sent = Hints()  # (the hints sent in the put's own pipeline)
        if not self._cluster:  # one server runs the pipeline in order: hints land after the jobs
            commands += self._hint_commands(hints)
            hints, sent = Hints(), hints
        if self._wait is not None:  # on the same connection: waits for the writes above
            commands.append(("WAIT", *self._wait))
        # A put without idempotency keys is not sent twice: had the first one reached Redis
        # before the connection broke, the jobs would be stored twice (the caller gets
        # BackendUnavailable and may retry with keys); with keys, Redis de-duplicates.
        repeatable = all(item.idempotency_key is not None for item in items)
        try:
            replies = await self._pipeline(commands, "put", repeatable=repeatable)
        except BackendUnavailable as e:  # (it may have run, on some shards or all)
            raise BackendUnavailable(f"{e.message}; {POSSIBLY_STORED}") from e
        self._hinted(sent)
        if self._wait is not None:
            check_acknowledged(int(replies[-1]), *self._wait)
        results = []
        for item, (index, position) in zip(items, slots, strict=True):
            reply = replies[index]
            if position >= 0:
                results.append(PutResult(item.job_id, offset=offset_of(reply[position])))
                continue
            result = put_result(item, reply)
            if item.idempotency_key is not None and not result.duplicate:
                hints.add(str(item.queue.group), item.due_ms)
            results.append(result)
        await self._send_hints(hints, "put")
        return results

    def _put_commands(self, items: Sequence[PutItem]) -> tuple[list[Command], list[_Slot], Hints]:
        """One APPEND per Cluster slot for the plain items, one PUT script per other item.

        ``slots[i]`` locates item ``i``'s reply: (command, position in an APPEND's reply) or
        (command, -1). A scripted item closes the open APPEND of its slot, so each queue's
        stream order is the order of ``items`` (a pipeline keeps command order per node). The
        hints are those of the items without an idempotency key.
        """
        commands: list[Command | Append] = []
        slots: list[_Slot] = []
        hints = Hints()
        appends: dict[int, Append] = {}  # open APPEND per slot
        streams: dict[QueueRef, tuple[str, int, str]] = {}  # a batch spans few queues
        for item in items:
            known = streams.get(item.queue)
            if known is None:
                key = self._keys.stream(item.queue)
                known = streams[item.queue] = (key, self._slot(key), str(item.queue.group))
            key, slot, name = known
            if item.idempotency_key is None:
                hints.add(name, item.due_ms)
            if item.idempotency_key is None and item.due_ms is None:
                append = appends.get(slot)
                if append is None:
                    append = appends[slot] = Append(len(commands))
                    commands.append(append)
                slots.append((append.index, append.add(key, item.payload)))
            else:
                appends.pop(slot, None)
                slots.append((len(commands), -1))
                commands.append(self._put_script(item, key))
        sha = self._append.sha
        return [c.command(sha) if isinstance(c, Append) else c for c in commands], slots, hints

    def _put_script(self, item: PutItem, stream: str) -> Command:
        group = item.queue.group
        keys = [stream, self._keys.delayed(group), self._keys.job_due(group)]
        if item.idempotency_key is not None:
            keys.append(self._keys.idempotency(group, item.idempotency_key))
        due = "" if item.due_ms is None else str(int(item.due_ms))
        args = (item.job_id, item.payload, due, item.queue.priority.value, self._window)
        return self._eval(self._put, keys, args)

    async def backlog(self, queues: Sequence[QueueRef]) -> list[int]:
        keys = self._keys
        commands = [
            self._eval(self._backlog, (keys.stream(q), keys.checkpoint(q)), ()) for q in queues
        ]
        return [int(n) for n in await self._pipeline(commands, "backlog")]

    async def delayed(self, groups: Sequence[GroupRef]) -> list[int]:
        commands = [("ZCARD", self._keys.delayed(g)) for g in groups]
        return [int(n) for n in await self._pipeline(commands, "delayed")]
