"""A group's dead letters on Redis: the owner writes and ages them
(:class:`~emq.core.interfaces.GroupOwner`), an operator lists and replays them
(:class:`~emq.core.interfaces.DeadLetterAdmin`).

``dlq(group)`` is a stream of dead letters (fields priority, payload, error, status, attempts,
failed_at), trimmed to the topic's retention (newest ``dlq_max_entries``, none older than
``dlq_max_age_s``) by each append and by :meth:`RedisDeadLetters.trim_dead`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from adapters.redis_queue.base import RedisQueueBase
from adapters.redis_queue.lua import FENCE, STREAMS
from adapters.redis_replies import Hints, dead_letter_of, dlq_id, retention_args
from emq.core.interfaces import DeadLetter
from emq.core.model import DLQ_DEFAULTS, DlqRetention, GroupRef

log = logging.getLogger(__name__)

# whole stream nodes, so a small DLQ would never age out). Ages by the server's clock, the one
# its '*' ids come from. -> how many letters were removed
_TRIM_DEAD = """
local function trim_dead(dlq, max_entries, max_age_ms)
  local t = redis.call('TIME')
  local min_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - max_age_ms
  local n = redis.call('XTRIM', dlq, 'MAXLEN', '=', max_entries)
  if min_ms > 0 then n = n + redis.call('XTRIM', dlq, 'MINID', '=', min_ms) end
  return n
end
"""

# KEYS: dlq, epoch  ARGV: epoch, max_entries, max_age_ms, then 6 per letter: priority, payload,
# error, status, attempts, failed_at -> {0, current} fenced | {1, appended}
DEAD_LETTER = (
    FENCE
    + _TRIM_DEAD
    + """
local current = fenced(KEYS[2], ARGV[1])
if current then return {0, current} end
local n = 0
for i = 4, #ARGV, 6 do
  redis.call('XADD', KEYS[1], '*', 'priority', ARGV[i], 'payload', ARGV[i + 1],
    'error', ARGV[i + 2], 'status', ARGV[i + 3], 'attempts', ARGV[i + 4],
    'failed_at', ARGV[i + 5])
  n = n + 1
end
trim_dead(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
return {1, n}
"""
)

# KEYS: dlq, epoch  ARGV: epoch, max_entries, max_age_ms -> how many letters were removed
# (fenced: a deposed owner, holding an older topic configuration maybe, removes nothing)
TRIM_DEAD = (
    FENCE
    + _TRIM_DEAD
    + """
if fenced(KEYS[2], ARGV[1]) then return 0 end
return trim_dead(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

# KEYS: dlq, high, medium, low  ARGV: limit[, id...] -> how many were moved
# Each letter is appended to its stream and deleted from the DLQ before the next is looked up,
# so an id given twice is moved once.
REPLAY_DEAD = (
    STREAMS
    + """
local limit = tonumber(ARGV[1])
local function move(letter)
  local fields = {}
  for i = 1, #letter[2], 2 do fields[letter[2][i]] = letter[2][i + 1] end
  local stream = streams[fields['priority']]
  if not stream or not fields['payload'] then return 0 end
  redis.call('XADD', stream, '*', 'd', fields['payload'])
  redis.call('XDEL', KEYS[1], letter[1])
  return 1
end
local moved = 0
if #ARGV > 1 then
  for i = 2, #ARGV do
    if moved >= limit then break end
    local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
    if #found > 0 then moved = moved + move(found[1]) end
  end
else
  for _, letter in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', limit)) do
    moved = moved + move(letter)
  end
end
return moved
"""
)


class RedisDeadLetters(RedisQueueBase):
    """Write, age, list and replay a group's dead letters."""

    def _register_scripts(self) -> None:
        super()._register_scripts()
        self._dead_letter = self._script(DEAD_LETTER)
        self._trim_dead = self._script(TRIM_DEAD)
        self._replay = self._script(REPLAY_DEAD)

    async def dead_letter(
        self,
        group: GroupRef,
        epoch: int,
        letters: Sequence[DeadLetter],
        retention: DlqRetention = DLQ_DEFAULTS,
    ) -> None:
        args: list[Any] = [epoch, *retention_args(retention)]
        for d in letters:
            status = "" if d.status is None else d.status
            args += (d.priority.value, d.payload, d.error, status, d.attempts, d.failed_at_ms)
        keys = (self._keys.dlq(group), self._keys.epoch(group))
        command = self._eval(self._dead_letter, keys, args)
        reply = await self._call(command, "dead_letter", repeatable=False)  # XADD: not twice
        self._fenced_result(reply, group, epoch, "dead letter")

    async def trim_dead(self, items: Sequence[tuple[GroupRef, int, DlqRetention]]) -> int:
        keys = self._keys
        commands = [
            self._eval(self._trim_dead, (keys.dlq(g), keys.epoch(g)), (e, *retention_args(r)))
            for g, e, r in items
        ]
        return sum(int(n) for n in await self._pipeline(commands, "trim_dead"))

    async def list_dead(self, group: GroupRef, after: str | None, limit: int) -> list[DeadLetter]:
        if limit <= 0:
            return []
        start = "-" if after is None else f"({dlq_id(after)}"
        command = ("XRANGE", self._keys.dlq(group), start, "+", "COUNT", limit)
        return [dead_letter_of(id_, f) for id_, f in await self._call(command, "list_dead")]

    async def replay_dead(self, group: GroupRef, ids: Sequence[str] | None, limit: int) -> int:
        if limit <= 0 or (ids is not None and not ids):
            return 0
        args = [limit, *(dlq_id(i) for i in ids or ())]
        keys = (self._keys.dlq(group), *self._group_streams(group))
        command = self._eval(self._replay, keys, args)
        # Not re-sent: a second run would move up to ``limit`` more letters than asked for.
        moved = int(await self._call(command, "replay_dead", repeatable=False))
        log.info("replayed %d dead letters of %s", moved, group)
        if moved:
            await self._send_hints(Hints.ready_of(group), "replay_dead")
        return moved
