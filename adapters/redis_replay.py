"""DLQ replays on Redis (:class:`~emq.core.replays.ReplayStore`).

Keys (:class:`~emq.core.naming.RedisKeys`):

* ``replay(id)``: hash, the replay: tenant, topic, namespace, groups, rate, mode, since_ms,
  until_ms, ids (how many were given), state, total, created_at, finished_at, error.
* ``replays(topic)``: sorted set of the topic's replay ids by creation time (the newest
  :data:`KEEP_PER_TOPIC` are kept); ``replays_running()``: set of the running ones.
* ``replay_lease(id)``: the mover that paces the replay (``SET NX PX``, renewed while it runs).
* ``replay_progress(group, id)``: hash in the GROUP's hash tag: state (running, done,
  cancelled), cursor and end (DLQ ids: the letters after the cursor up to the end are left),
  pos (by ids: how many of the list were done), moved, skipped. ``replay_ids(group, id)``: the
  list of a by-ids replay's entries in that group.

Why the progress lives in the group's slot: :data:`MOVE` runs on the DLQ, the three streams and
the progress together, so "letter appended to its queue, deleted from the DLQ, cursor past it,
counted" is one atomic step. A step re-sent after a broken connection, or a mover that crashed
between steps, moves nothing twice and loses nothing: the next step starts from the stored
cursor, whoever sends it. Cancelling writes ``cancelled`` into every group's progress, which
:data:`MOVE` checks, so a cancel stops the moves at once even if a mover has not noticed it yet.

Finished replays (and their progress) expire after :data:`FINISHED_TTL_S`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.commands.core import AsyncScript

from adapters.redis_conn import Client, OwnedClient, RedisCalls
from adapters.redis_replies import Command, text
from emq.core.errors import ConfigConflict, NotFound
from emq.core.interfaces import BackendHealth
from emq.core.model import GroupRef, Namespace, TopicRef
from emq.core.naming import RedisKeys
from emq.core.replays import Progress, Replay, ReplayState, Selection, Slice

log = logging.getLogger(__name__)

FINISHED_TTL_S = 7 * 86400
KEEP_PER_TOPIC = 100
COUNT_STEP = 10_000  # letters a counting call walks (keeps each script short)
READY_MAXLEN = 100_000  # as adapters.redis_queue's ready stream
_MAX_SEQ = "18446744073709551615"

# KEYS: dlq (or a delivered log), high, medium, low, progress[, ids]  ARGV: limit, 'copy' (a
# redelivery: the entries stay where they are) or 'move'
# -> {moved, skipped, exhausted (0|1), stopped (0|1: cancelled, nothing moved)}
MOVE = """
local streams = {high = KEYS[2], medium = KEYS[3], low = KEYS[4]}
local p = redis.call('HMGET', KEYS[5], 'state', 'cursor', 'end', 'pos')
if p[1] ~= 'running' then return {0, 0, 1, p[1] == 'cancelled' and 1 or 0} end
local limit = tonumber(ARGV[1])
local moved, skipped = 0, 0
local function move(letter)
  local fields = {}
  for i = 1, #letter[2], 2 do fields[letter[2][i]] = letter[2][i + 1] end
  local stream = streams[fields['priority']]
  if not stream or not fields['payload'] then skipped = skipped + 1 return end
  redis.call('XADD', stream, '*', 'd', fields['payload'])
  if ARGV[2] ~= 'copy' then redis.call('XDEL', KEYS[1], letter[1]) end
  moved = moved + 1
end
local exhausted
if KEYS[6] then
  local pos = tonumber(p[4] or '0')
  local ids = redis.call('LRANGE', KEYS[6], pos, pos + limit - 1)
  for _, id in ipairs(ids) do
    local found = redis.call('XRANGE', KEYS[1], id, id)
    if #found > 0 then move(found[1]) else skipped = skipped + 1 end
  end
  redis.call('HSET', KEYS[5], 'pos', pos + #ids)
  exhausted = pos + #ids >= redis.call('LLEN', KEYS[6])
else
  local letters = redis.call('XRANGE', KEYS[1], '(' .. p[2], p[3], 'COUNT', limit)
  for _, letter in ipairs(letters) do move(letter) end
  if #letters > 0 then redis.call('HSET', KEYS[5], 'cursor', letters[#letters][1]) end
  exhausted = #letters < limit
end
redis.call('HINCRBY', KEYS[5], 'moved', moved)
redis.call('HINCRBY', KEYS[5], 'skipped', skipped)
if exhausted then redis.call('HSET', KEYS[5], 'state', 'done') end
return {moved, skipped, exhausted and 1 or 0, 0}
"""

# KEYS: dlq  ARGV: after (exclusive), to (inclusive), cap -> {letters counted, last id or ''}
COUNT = """
local n, last, after = 0, '', '(' .. ARGV[1]
local cap = tonumber(ARGV[3])
while n < cap do
  local page = redis.call('XRANGE', KEYS[1], after, ARGV[2], 'COUNT', math.min(1000, cap - n))
  if #page == 0 then break end
  n = n + #page
  last = page[#page][1]
  after = '(' .. last
end
return {n, last}
"""

# KEYS: dlq -> {length, newest id or ''}: a DLQ's extent at one instant
EXTENT = """
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
return {redis.call('XLEN', KEYS[1]), newest[1] and newest[1][1] or ''}
"""

# KEYS: replay or progress hash  ARGV: from, to[, finished_at, error] -> 1 if changed
TRANSITION = """
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
if ARGV[3] then redis.call('HSET', KEYS[1], 'finished_at', ARGV[3], 'error', ARGV[4]) end
return 1
"""

# KEYS: lease  ARGV: owner, ttl_ms -> 1 if held by owner now
LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
"""

# KEYS: lease  ARGV: owner
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


def _before(ms: int) -> str:
    """The DLQ id just before any id of millisecond ``ms`` (an exclusive start)."""
    return f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else "0-0"


def _id_key(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0)


class RedisReplayStore(OwnedClient):
    """Replays and their progress on Redis; see the module docstring for the keys."""

    def __init__(self, client: Client, keys: RedisKeys, *, owns_client: bool = False) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys
        self.health = BackendHealth()
        register = client.register_script
        self._move = register(MOVE)
        self._count = register(COUNT)
        self._extent = register(EXTENT)
        self._transition = register(TRANSITION)
        self._lease = register(LEASE)
        self._release = register(RELEASE)
        scripts = (self._move, self._count, self._extent, self._transition)
        self._calls = RedisCalls(client, (*scripts, self._lease, self._release), self.health)

    @staticmethod
    def _eval(script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    async def _run(self, commands: Sequence[Command], what: str) -> list[Any]:
        # Every command here may be sent twice: MOVE starts from the stored cursor.
        return await self._calls.pipeline(commands, what)

    def _streams(self, group: GroupRef) -> tuple[str, str, str]:
        k = self._keys
        return tuple(k.stream(q) for q in group.queues())  # type: ignore[return-value]

    # ------------------------------------------------------------------ creating

    async def create(self, replay: Replay) -> Replay:
        per_group = await self._plan(replay)
        total = sum(n for n, _ in per_group.values())
        replay = dataclasses.replace(replay, total=total)
        commands: list[Command] = []
        for group in replay.group_refs():
            n, fields = per_group.get(group.index, (0, {}))
            commands += self._progress_commands(replay, group, n, fields)
        key = self._keys.replay(replay.id)
        index = self._keys.replays(replay.topic)
        commands += [
            ("HSET", key, *_flat(_fields_of(replay))),
            ("ZADD", index, int(replay.created_at * 1000), replay.id),
            ("ZREMRANGEBYRANK", index, 0, -KEEP_PER_TOPIC - 1),
            ("SADD", self._keys.replays_running(), replay.id),
        ]
        await self._run(commands, "create replay")  # progress first: a mover finds it ready
        log.info("replay %s of %s: %d letters at %g/s", replay.id, replay.topic, total, replay.rate)
        return replay

    def _progress_commands(
        self, replay: Replay, group: GroupRef, n: int, fields: dict[str, Any]
    ) -> list[Command]:
        key = self._keys.replay_progress(group, replay.id)
        head = ("HSET", key, "state", "running" if n else "done", "moved", 0, "skipped", 0)
        ids = fields.get("_ids")
        if ids is None:
            return [(*head, *_flat(fields))]
        commands: list[Command] = [(*head, "pos", 0)]
        if ids:
            commands.append(("RPUSH", self._keys.replay_ids(group, replay.id), *ids))
        return commands

    async def _plan(self, replay: Replay) -> dict[int, tuple[int, dict[str, Any]]]:
        """Per group: how many letters are selected, and where its cursor starts and ends."""
        selection = replay.selection
        if selection.ids is not None:
            by_group = selection.ids_by_group().items()
            return {g: (len(ids), {"_ids": ids}) for g, ids in by_group if g < replay.groups}
        groups = replay.group_refs()
        commands = [self._eval(self._extent, (self._source(replay, g),), ()) for g in groups]
        extents = await self._run(commands, "replay extent")
        plan: dict[int, tuple[int, dict[str, Any]]] = {}
        for group, (length, newest) in zip(groups, extents, strict=True):
            newest = text(newest)
            if not newest:
                continue
            if selection.mode == "all":
                plan[group.index] = (int(length), {"cursor": "0-0", "end": newest})
            else:
                plan[group.index] = await self._window(
                    self._source(replay, group), selection, newest
                )
        return plan

    def _source(self, replay: Replay, group: GroupRef) -> str:
        """The stream a replay reads in ``group``: its DLQ, or its delivered log."""
        if replay.source == "delivered":
            return self._keys.delivered_log(group)
        return self._keys.dlq(group)

    async def _window(
        self, dlq: str, selection: Selection, newest: str
    ) -> tuple[int, dict[str, Any]]:
        cursor = _before(selection.since_ms or 0)
        end = newest
        if selection.until_ms is not None:
            until = f"{selection.until_ms}-{_MAX_SEQ}"
            end = min(newest, until, key=_id_key)
        count, after = 0, cursor
        while _id_key(after) < _id_key(end):
            ((n, last),) = await self._run(
                [self._eval(self._count, (dlq,), (after, end, COUNT_STEP))], "replay count"
            )
            count += int(n)
            if int(n) < COUNT_STEP:
                break
            after = text(last)
        return count, {"cursor": cursor, "end": end}

    # ------------------------------------------------------------------ reading

    async def get(self, topic: TopicRef, replay_id: str) -> Progress:
        (fields,) = await self._run([("HGETALL", self._keys.replay(replay_id))], "get replay")
        replay = _replay_of(replay_id, fields)
        if replay is None or replay.topic != topic:
            raise NotFound(f"no replay {replay_id} of {topic}")
        return await self._progress(replay)

    async def _progress(self, replay: Replay) -> Progress:
        commands: list[Command] = [
            ("HMGET", self._keys.replay_progress(g, replay.id), "moved", "skipped")
            for g in replay.group_refs()
        ]
        counts = await self._run(commands, "replay progress")
        moved = sum(int(m or 0) for m, _ in counts)
        skipped = sum(int(s or 0) for _, s in counts)
        if replay.state is ReplayState.DONE:
            skipped = max(skipped, replay.total - moved)  # the rest left the DLQ meanwhile
        return Progress(replay, moved, skipped)

    async def latest(self, topic: TopicRef, limit: int) -> list[Progress]:
        index = self._keys.replays(topic)
        (ids,) = await self._run([("ZREVRANGE", index, 0, max(0, limit - 1))], "list replays")
        out = []
        for replay_id in ids:
            try:
                out.append(await self.get(topic, text(replay_id)))
            except NotFound:  # expired
                continue
        return out

    async def active(self) -> list[Replay]:
        (ids,) = await self._run([("SMEMBERS", self._keys.replays_running())], "running replays")
        ids = sorted(text(i) for i in ids)
        rows = await self._run([("HGETALL", self._keys.replay(i)) for i in ids], "running replays")
        out = []
        for replay_id, fields in zip(ids, rows, strict=True):
            replay = _replay_of(replay_id, fields)
            if replay is not None and replay.state is ReplayState.RUNNING:
                out.append(replay)
            else:  # finished, or expired: not running any more
                await self._run([("SREM", self._keys.replays_running(), replay_id)], "replays")
        return out

    # ------------------------------------------------------------------ moving

    async def move(self, replay: Replay, counts: Sequence[tuple[int, int]]) -> list[Slice]:
        commands = [self._move_command(replay, GroupRef(replay.topic, g), n) for g, n in counts]
        replies = await self._run(commands, "replay move")
        slices = [Slice(int(m), int(s), bool(e), bool(x)) for m, s, e, x in replies]
        names = [
            str(GroupRef(replay.topic, g))
            for (g, _), s in zip(counts, slices, strict=True)
            if s.moved
        ]
        if names:  # wake the owners (a lost signal only waits for their sweep)
            ready = ("XADD", self._keys.ready(), "MAXLEN", "~", READY_MAXLEN, "*")
            await self._run([(*ready, "g", "\n".join(names))], "replay signal")
        return slices

    def _move_command(self, replay: Replay, group: GroupRef, n: int) -> Command:
        keys = [self._source(replay, group), *self._streams(group)]
        keys.append(self._keys.replay_progress(group, replay.id))
        if replay.selection.ids is not None:
            keys.append(self._keys.replay_ids(group, replay.id))
        mode = "copy" if replay.source == "delivered" else "move"
        return self._eval(self._move, keys, (max(1, n), mode))

    async def lease(self, replay_id: str, owner: str, ttl_s: float) -> bool:
        key = self._keys.replay_lease(replay_id)
        command = self._eval(self._lease, (key,), (owner, max(1, int(ttl_s * 1000))))
        (held,) = await self._run([command], "replay lease")
        return bool(held)

    async def release(self, replay_id: str, owner: str) -> None:
        key = self._keys.replay_lease(replay_id)
        await self._run([self._eval(self._release, (key,), (owner,))], "replay release")

    # ------------------------------------------------------------------ ending

    async def finish(self, replay: Replay, state: ReplayState, error: str = "") -> bool:
        key = self._keys.replay(replay.id)
        args = ("running", state.value, f"{time.time():.3f}", error)
        (changed,) = await self._run([self._eval(self._transition, (key,), args)], "end replay")
        if changed:
            await self._expire(replay)
            log.info("replay %s of %s: %s %s", replay.id, replay.topic, state.value, error)
        return bool(changed)

    async def cancel(self, topic: TopicRef, replay_id: str) -> Progress:
        progress = await self.get(topic, replay_id)
        replay = progress.replay
        if replay.state is ReplayState.RUNNING:
            # The groups first: MOVE checks them, so no step moves anything after this.
            commands = [
                self._eval(self._transition, (self._keys.replay_progress(g, replay.id),),
                           ("running", "cancelled"))
                for g in replay.group_refs()
            ]  # fmt: skip
            await self._run(commands, "cancel replay")
            await self.finish(replay, ReplayState.CANCELLED)
            return await self.get(topic, replay_id)
        if replay.state is not ReplayState.CANCELLED:
            raise ConfigConflict(f"replay {replay_id} already ended: {replay.state.value}")
        return progress

    async def _expire(self, replay: Replay) -> None:
        keys = [self._keys.replay(replay.id)]
        for g in replay.group_refs():
            keys += [self._keys.replay_progress(g, replay.id), self._keys.replay_ids(g, replay.id)]
        commands: list[Command] = [("EXPIRE", k, FINISHED_TTL_S) for k in keys]
        commands.append(("SREM", self._keys.replays_running(), replay.id))
        await self._run(commands, "end replay")


def _flat(fields: dict[str, Any]) -> list[Any]:
    return [x for k, v in fields.items() for x in (k, v)]


def _fields_of(replay: Replay) -> dict[str, Any]:
    s, t = replay.selection, replay.topic
    return {
        "tenant": t.tenant,
        "topic": t.topic,
        "namespace": t.namespace.value,
        "groups": replay.groups,
        "rate": repr(replay.rate),
        "mode": s.mode,
        "ids": len(s.ids or ()),
        "since_ms": "" if s.since_ms is None else s.since_ms,
        "until_ms": "" if s.until_ms is None else s.until_ms,
        "state": replay.state.value,
        "total": replay.total,
        "created_at": f"{replay.created_at:.3f}",
        "finished_at": "",
        "error": "",
        "source": replay.source,
    }


def _replay_of(replay_id: str, raw: Any) -> Replay | None:
    f = {text(k): text(v) for k, v in (raw or {}).items()}
    if "topic" not in f:
        return None
    topic = TopicRef(Namespace(f["namespace"]), f["tenant"], f["topic"])
    ids = int(f.get("ids") or 0)
    selection = Selection(
        ids=("?",) * ids if f.get("mode") == "ids" else None,  # the count is what is shown
        since_ms=int(f["since_ms"]) if f.get("since_ms") else None,
        until_ms=int(f["until_ms"]) if f.get("until_ms") else None,
    )
    return Replay(
        id=replay_id,
        topic=topic,
        groups=int(f["groups"]),
        rate=float(f["rate"]),
        selection=selection,
        state=ReplayState(f["state"]),
        total=int(f.get("total") or 0),
        created_at=float(f.get("created_at") or 0),
        finished_at=float(f["finished_at"]) if f.get("finished_at") else None,
        error=f.get("error", ""),
        source=f.get("source") or "dlq",
    )
