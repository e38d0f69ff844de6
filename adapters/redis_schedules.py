"""Schedules on Redis (:class:`~emq.core.schedules.ScheduleStore`).

Keys, all in one hash tag (``{sched}``) so that each script below runs on one slot of a Cluster:

* ``P:sched:{sched}:due``: sorted set, each active schedule (member ``ns:tenant:topic:id``,
  components escaped) under the epoch of its next tick, or of its claim's lease end. A firer
  reads only its head (``ZRANGEBYSCORE -inf now LIMIT``): idle schedules cost nothing.
* ``P:sched:{sched}:s:<member>``: hash, the schedule (``def``, JSON) and its state: ``cursor``
  (next tick), ``p_tick``/``p_group``/``p_job`` (the tick being fired), ``last_*``, counters.
* ``P:sched:{sched}:t:<ns:tenant:topic>``: set, the topic's schedule ids.

Every step a firer takes is a script that compares the cursor first (:data:`BEGIN`,
:data:`ADVANCE`, :data:`SKIP`), so a step sent twice, or by two firers, or after an edit,
changes nothing the second time. Each takes the steps of many schedules in one call (one reply
to parse instead of a thousand). Every schedule shares the one slot: their load is a few writes
per tick, and a firer's claim reads at most ``batch`` of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from redis.commands.core import AsyncScript

from adapters.redis_conn import Client, OwnedClient, translated
from emq.core.errors import AlreadyExists, InvalidInput, NotFound
from emq.core.model import Namespace, TopicRef
from emq.core.naming import RedisKeys, escape
from emq.core.schedules import (
    MAX_SCHEDULES_PER_TOPIC,
    Advance,
    Begin,
    Claimed,
    Pending,
    Schedule,
    ScheduleState,
    ScheduleStore,
    Skip,
)

_STATE = (
    "cursor", "p_tick", "p_group", "p_job", "last_tick", "last_job", "last_at", "last_lag",
    "fired", "skipped", "late",
)  # fmt: skip

# KEYS: record, topic set, due  ARGV: def, cursor ('' none), id, member, max -> 1 | -1 | -2
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -2 end
redis.call('HSET', KEYS[1], 'def', ARGV[1], 'fired', 0, 'skipped', 0, 'late', 0)
redis.call('SADD', KEYS[2], ARGV[3])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'cursor', ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
end
return 1
"""

# KEYS: record, due  ARGV: def, cursor ('' none), member -> 1 | -1 (gone)
REPLACE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'def', ARGV[1])
redis.call('HDEL', KEYS[1], 'p_tick', 'p_group', 'p_job')
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'cursor')
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  redis.call('HSET', KEYS[1], 'cursor', ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
end
return 1
"""

# KEYS: record, topic set, due  ARGV: id, member -> 1 | 0 (gone)
DELETE = """
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
"""

# KEYS: due  ARGV: now, lease end, limit, record key prefix
# -> {member, def, cursor, p_tick, p_group, p_job, ...}: what a firer needs, no more
# (the records are read by name: they share the due set's hash tag, so the slot is the same)
CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], m)
  local rec = redis.call('HMGET', ARGV[4] .. m, 'def', 'cursor', 'p_tick', 'p_group', 'p_job')
  if rec[1] then
    out[#out + 1] = m
    for i = 1, 5 do out[#out + 1] = rec[i] or '' end
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
return out
"""
_CLAIMED = ("cursor", "p_tick", "p_group", "p_job")

# The steps of many schedules in one call (one reply to parse, not one per schedule): each takes
# KEYS: due  ARGV: record key prefix, then a fixed number of arguments per schedule.

# per schedule: member, cursor, tick, group, job, skipped -> {tick, group, job} | {} per schedule
BEGIN = """
local out = {}
for i = 2, #ARGV, 6 do
  local rec = ARGV[1] .. ARGV[i]
  local c = redis.call('HMGET', rec, 'cursor', 'p_tick', 'p_group', 'p_job')
  if c[1] ~= ARGV[i + 1] then
    out[#out + 1] = {}
  elseif c[2] == ARGV[i + 2] then
    out[#out + 1] = {c[2], c[3], c[4]}
  else
    redis.call('HSET', rec, 'cursor', ARGV[i + 2], 'p_tick', ARGV[i + 2], 'p_group', ARGV[i + 3],
               'p_job', ARGV[i + 4])
    if tonumber(ARGV[i + 5]) > 0 then redis.call('HINCRBY', rec, 'skipped', ARGV[i + 5]) end
    out[#out + 1] = {ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]}
  end
end
return out
"""

# per schedule: member, tick, job, cursor ('' ended), fired_at, lag, late -> 1 | 0 each
ADVANCE = """
local out = {}
for i = 2, #ARGV, 7 do
  local rec, m = ARGV[1] .. ARGV[i], ARGV[i]
  if redis.call('HGET', rec, 'cursor') ~= ARGV[i + 1] then
    out[#out + 1] = 0
  else
    redis.call('HSET', rec, 'last_tick', ARGV[i + 1], 'last_job', ARGV[i + 2],
               'last_at', ARGV[i + 4], 'last_lag', ARGV[i + 5])
    redis.call('HDEL', rec, 'p_tick', 'p_group', 'p_job')
    redis.call('HINCRBY', rec, 'fired', 1)
    if ARGV[i + 6] == '1' then redis.call('HINCRBY', rec, 'late', 1) end
    if ARGV[i + 3] == '' then
      redis.call('HDEL', rec, 'cursor')
      redis.call('ZREM', KEYS[1], m)
    else
      redis.call('HSET', rec, 'cursor', ARGV[i + 3])
      redis.call('ZADD', KEYS[1], ARGV[i + 3], m)
    end
    out[#out + 1] = 1
  end
end
return out
"""

# per schedule: member, cursor, to ('' ended), skipped -> 1 | 0 each
SKIP = """
local out = {}
for i = 2, #ARGV, 4 do
  local rec, m = ARGV[1] .. ARGV[i], ARGV[i]
  local c = redis.call('HMGET', rec, 'cursor', 'p_tick')
  if c[1] ~= ARGV[i + 1] or c[2] then
    out[#out + 1] = 0
  else
    redis.call('HINCRBY', rec, 'skipped', ARGV[i + 3])
    if ARGV[i + 2] == '' then
      redis.call('HDEL', rec, 'cursor')
      redis.call('ZREM', KEYS[1], m)
    else
      redis.call('HSET', rec, 'cursor', ARGV[i + 2])
      redis.call('ZADD', KEYS[1], ARGV[i + 2], m)
    end
    out[#out + 1] = 1
  end
end
return out
"""


def _int(raw: Any) -> int | None:
    return None if raw in (None, "", b"") else int(raw)


def _float(raw: Any) -> float | None:
    return None if raw in (None, "", b"") else float(raw)


def _str(raw: Any) -> str | None:
    if raw in (None, "", b""):
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def state_of(values: Sequence[Any]) -> ScheduleState:
    """A state from the fields of :data:`_STATE`, in that order."""
    v = dict(zip(_STATE, values, strict=True))
    return ScheduleState(
        cursor=_int(v["cursor"]),
        pending_tick=_int(v["p_tick"]),
        pending_group=_int(v["p_group"]),
        pending_job=_str(v["p_job"]),
        last_tick=_int(v["last_tick"]),
        last_job=_str(v["last_job"]),
        last_fired_at=_float(v["last_at"]),
        last_lag_s=_float(v["last_lag"]),
        fired=_int(v["fired"]) or 0,
        skipped=_int(v["skipped"]) or 0,
        late=_int(v["late"]) or 0,
    )


def _topic_of(member: str) -> TopicRef:
    ns, tenant, topic, _ = member.split(":")
    return TopicRef(Namespace(_unescape(ns)), _unescape(tenant), _unescape(topic))


def _unescape(text: str) -> str:
    # emq.core.naming.escape writes %, {, }, : as %25, %7B, %7D, %3A
    for code, ch in (("%7B", "{"), ("%7D", "}"), ("%3A", ":"), ("%25", "%")):
        text = text.replace(code, ch)
    return text


class RedisScheduleStore(OwnedClient, ScheduleStore):
    def __init__(self, client: Client, keys: RedisKeys, *, owns_client: bool = False) -> None:
        super().__init__(client, owns_client=owns_client)
        self._client = client
        base = f"{keys.prefix}:sched:{{sched}}"
        self._due = base + ":due"
        self._records = base + ":s:"
        self._topics = base + ":t:"
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(text)
            for name, text in (
                ("create", CREATE),
                ("replace", REPLACE),
                ("delete", DELETE),
                ("claim", CLAIM),
                ("begin", BEGIN),
                ("advance", ADVANCE),
                ("skip", SKIP),
            )
        }

    # ----------------------------------------------------------------- naming

    @staticmethod
    def member(topic: TopicRef, schedule_id: str) -> str:
        parts = (topic.namespace.value, topic.tenant, topic.topic, schedule_id)
        return ":".join(escape(p) for p in parts)

    def _record(self, topic: TopicRef, schedule_id: str) -> str:
        return self._records + self.member(topic, schedule_id)

    def _topic_set(self, topic: TopicRef) -> str:
        parts = (topic.namespace.value, topic.tenant, topic.topic)
        return self._topics + ":".join(escape(p) for p in parts)

    # ----------------------------------------------------------------- definitions

    async def create(self, schedule: Schedule, cursor: int | None) -> None:
        ref, sid = schedule.topic, schedule.id
        with translated("create schedule"):
            done = await self._scripts["create"](
                keys=[self._record(ref, sid), self._topic_set(ref), self._due],
                args=[_encode(schedule), _arg(cursor), sid, self.member(ref, sid),
                      MAX_SCHEDULES_PER_TOPIC],
            )  # fmt: skip
        if done == -1:
            raise AlreadyExists(f"schedule {sid!r} already exists in topic {ref}")
        if done == -2:
            raise InvalidInput(
                "id", f"topic {ref} has {MAX_SCHEDULES_PER_TOPIC} schedules, the most it may have"
            )

    async def get(self, topic: TopicRef, schedule_id: str) -> tuple[Schedule, ScheduleState]:
        with translated("read schedule"):
            raw = await self._client.hmget(self._record(topic, schedule_id), ["def", *_STATE])
        if raw[0] is None:
            raise NotFound(f"no schedule {schedule_id!r} in topic {topic}")
        return _decode(topic, raw[0]), state_of(raw[1:])

    async def of_topic(self, topic: TopicRef) -> list[tuple[Schedule, ScheduleState]]:
        with translated("list schedules"):
            ids = sorted(_str(i) or "" for i in await self._client.smembers(self._topic_set(topic)))
            pipe = self._client.pipeline(transaction=False)
            for sid in ids:
                pipe.hmget(self._record(topic, sid), ["def", *_STATE])
            rows = await pipe.execute() if ids else []
        return [(_decode(topic, r[0]), state_of(r[1:])) for r in rows if r[0] is not None]

    async def replace(self, schedule: Schedule, cursor: int | None) -> ScheduleState:
        ref, sid = schedule.topic, schedule.id
        with translated("change schedule"):
            done = await self._scripts["replace"](
                keys=[self._record(ref, sid), self._due],
                args=[_encode(schedule), _arg(cursor), self.member(ref, sid)],
            )
        if done == -1:
            raise NotFound(f"no schedule {sid!r} in topic {ref}")
        return (await self.get(ref, sid))[1]

    async def delete(self, topic: TopicRef, schedule_id: str) -> None:
        with translated("delete schedule"):
            done = await self._scripts["delete"](
                keys=[self._record(topic, schedule_id), self._topic_set(topic), self._due],
                args=[schedule_id, self.member(topic, schedule_id)],
            )
        if not done:
            raise NotFound(f"no schedule {schedule_id!r} in topic {topic}")

    # ----------------------------------------------------------------- firing

    async def claim_due(self, now: float, lease_s: float, limit: int) -> list[Claimed]:
        with translated("claim due schedules"):
            flat = await self._scripts["claim"](
                keys=[self._due], args=[repr(now), repr(now + lease_s), limit, self._records]
            )
        out = []
        for i in range(0, len(flat), 6):
            topic = _topic_of(_str(flat[i]) or "")
            state = dict(zip(_CLAIMED, flat[i + 2 : i + 6], strict=True))
            claimed = ScheduleState(
                cursor=_int(state["cursor"]),
                pending_tick=_int(state["p_tick"]),
                pending_group=_int(state["p_group"]),
                pending_job=_str(state["p_job"]),
            )
            out.append(Claimed(_decode(topic, flat[i + 1]), claimed))
        return out

    async def _batch(self, script: str, rows: list[list[Any]], what: str) -> list[Any]:
        """One call of a batch script (:data:`BEGIN`, :data:`ADVANCE`, :data:`SKIP`)."""
        if not rows:
            return []
        args: list[Any] = [self._records]
        for row in rows:
            args += row
        with translated(what):
            return list(await self._scripts[script](keys=[self._due], args=args))

    async def begin(self, steps: Sequence[Begin]) -> list[Pending | None]:
        rows = [
            [self.member(s.topic, s.schedule_id), s.cursor, s.tick, s.group, s.job_id, s.skipped]
            for s in steps
        ]
        replies = await self._batch("begin", rows, "begin schedule ticks")
        return [Pending(int(r[0]), int(r[1]), _str(r[2]) or "") if r else None for r in replies]

    async def advance(self, steps: Sequence[Advance]) -> list[bool]:
        rows = [
            [self.member(s.topic, s.schedule_id), s.tick, s.job_id, _arg(s.cursor),
             repr(s.fired_at), repr(round(s.lag_s, 6)), int(s.late)]
            for s in steps
        ]  # fmt: skip
        return [bool(r) for r in await self._batch("advance", rows, "advance schedules")]

    async def skip(self, steps: Sequence[Skip]) -> list[bool]:
        rows = [
            [self.member(s.topic, s.schedule_id), s.cursor, _arg(s.to), s.skipped] for s in steps
        ]
        return [bool(r) for r in await self._batch("skip", rows, "skip schedule ticks")]

    async def next_due(self) -> float | None:
        with translated("read due schedules"):
            head = await self._client.zrange(self._due, 0, 0, withscores=True)
        return float(head[0][1]) if head else None


def _arg(cursor: int | None) -> str:
    return "" if cursor is None else str(cursor)


def _encode(schedule: Schedule) -> str:
    return json.dumps(schedule.to_dict(), separators=(",", ":"))


def _decode(topic: TopicRef, raw: Any) -> Schedule:
    return Schedule.from_dict(topic, json.loads(raw))
