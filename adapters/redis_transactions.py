"""Transactions on Redis (:class:`~emq.core.transactions.TransactionStore`).

Keys (:class:`~emq.core.naming.RedisKeys`), all of one topic in the topic's own hash tag:

* ``transaction(topic, id, "rec")``: hash, the transaction (topic, check_url, timeout_s,
  created_ms, state, jobs, next_check_ms, checks, decided_ms, source, detail, released);
  ``(.., "jobs")``: list, its prepared jobs (:func:`~emq.core.transactions.encode_prepared`);
  ``(.., "log")``: list of JSON lines, what happened (the newest ``LOG_MAX``).
* ``transactions(topic, "open")``: zset open id -> next check ms; ``"releasing"``: set of
  committed ids not released yet; ``"all"``: zset id -> created ms (the newest ``KEEP``);
  ``"jobidx"``: hash prepared job id -> transaction id (job status); ``"prepared"``: the count of
  the topic's prepared jobs (the backlog guard).
* ``tx_released(group, id)``: marker in the GROUP's tag, set by :data:`RELEASE_GROUP` in the same
  step that appends the transaction's jobs of that group: a release repeated by anyone appends
  nothing twice. It outlives the transaction's record (``MARKER_TTL_S``).
* ``tx_index()`` / ``tx_index_generations()``: the runners' index of topics with work (score:
  when), and per topic a generation bumped by each write that gives the topic work, so a runner
  that found nothing removes the topic only if nobody wrote since it looked.

Why one slot per topic: create (with the open-transactions limit), prepare (state still open,
jobs limit), decide (compare-and-set from open; a rollback deletes the prepared jobs) are then
each one script, atomic on a Cluster too. The release crosses slots (each group has its own) and
is therefore made recoverable instead: decision first, then one idempotent step per group, then
``released`` (see :mod:`emq.core.transactions` for why the workers still see all or nothing).

Writes wait for replicas as ``EMQ_DURABILITY=replica`` asks (``wait_replicas``), like a put.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.commands.core import AsyncScript

from adapters.redis_conn import Client, OwnedClient, RedisCalls, check_acknowledged
from adapters.redis_replies import Command, text
from emq.core.errors import NotFound, PayloadTooLarge
from emq.core.interfaces import BackendHealth, PutItem
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys
from emq.core.transactions import (
    DECIDED_TTL_S,
    LOG_MAX,
    LogEntry,
    Pending,
    Source,
    TooManyTransactions,
    TopicClaim,
    Transaction,
    TransactionClosed,
    TransactionLimits,
    TransactionStore,
    TxState,
    decode_prepared,
    encode_prepared,
)

log = logging.getLogger(__name__)

KEEP = 1000  # transactions listed per topic (older ones stay readable by id until they expire)
MARKER_TTL_S = 2 * DECIDED_TTL_S
READY_MAXLEN = 100_000  # as adapters.redis_queue's ready stream
CHUNK = 500  # elements per command inside a script (bounds Lua's unpack)

# Deletes a transaction's prepared jobs, their job index entries and their count.
_DROP = """
local function drop(jobs, index, count)
  local n = redis.call('LLEN', jobs)
  local start = 0
  while start < n do
    local els = redis.call('LRANGE', jobs, start, start + 499)
    local ids = {}
    for i, el in ipairs(els) do ids[i] = string.match(el, '^(%S+)') end
    if #ids > 0 then redis.call('HDEL', index, unpack(ids)) end
    start = start + 500
  end
  redis.call('DEL', jobs)
  if n > 0 then redis.call('DECRBY', count, n) end
end
"""

_LOG = f"""
local function note(key, entry)
  redis.call('RPUSH', key, entry)
  redis.call('LTRIM', key, -{LOG_MAX}, -1)
end
"""

# KEYS: rec, log, open, all  ARGV: id, max_open, created_ms, next_ms, entry, keep, fields...
# -> -2 created | -1 existed already (a repeated call) | n: the topic has n open (the limit)
CREATE = (
    _LOG
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = redis.call('ZCARD', KEYS[3])
if n >= tonumber(ARGV[2]) then return n end
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -tonumber(ARGV[6]) - 1)
note(KEYS[2], ARGV[5])
return -2
"""
)

# KEYS: rec, jobs, jobidx, prepared, log  ARGV: id, max_jobs, entry, (job_id, element)...
# -> {1, jobs now} | {0, state} not open | {0, 'missing'} | {0, 'limit', jobs now}
PREPARE = (
    _LOG
    + """
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return {0, 'missing'} end
if st ~= 'open' then return {0, st} end
local n = (#ARGV - 3) / 2
local have = tonumber(redis.call('HGET', KEYS[1], 'jobs') or '0')
if have + n > tonumber(ARGV[2]) then return {0, 'limit', have} end
local els, idx = {}, {}
local function flush()
  if #els > 0 then
    redis.call('RPUSH', KEYS[2], unpack(els))
    redis.call('HSET', KEYS[3], unpack(idx))
  end
  els, idx = {}, {}
end
for i = 4, #ARGV, 2 do
  els[#els + 1] = ARGV[i + 1]
  idx[#idx + 1] = ARGV[i]
  idx[#idx + 1] = ARGV[1]
  if #els == 500 then flush() end
end
flush()
redis.call('HINCRBY', KEYS[1], 'jobs', n)
redis.call('INCRBY', KEYS[4], n)
note(KEYS[5], ARGV[3])
return {1, have + n}
"""
)

# KEYS: rec, log, open, releasing, jobs, jobidx, prepared
# ARGV: id, state, source, detail, now_ms, entry, ttl  -> 'decided' | the state it had | 'missing'
DECIDE = (
    _LOG
    + _DROP
    + """
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return 'missing' end
if st ~= 'open' then return st end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'source', ARGV[3], 'detail', ARGV[4],
           'decided_ms', ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[1])
note(KEYS[2], ARGV[6])
if ARGV[2] == 'committed' then
  redis.call('SADD', KEYS[4], ARGV[1])
else
  drop(KEYS[5], KEYS[6], KEYS[7])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('EXPIRE', KEYS[2], ARGV[7])
end
return 'decided'
"""
)

# KEYS: marker, high, medium, low, delayed, job_due, idempotency keys...
# ARGV: marker_ttl, idempotency window, then per job: priority, due_ms or '', the index in KEYS
# of its idempotency key or 0, job id, payload  -> {1, appended, duplicates} | {0, 0, 0} done
# before. The marker and the appends are one step: the group gets all of the transaction's jobs
# at once, and only once.
RELEASE_GROUP = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return {0, 0, 0} end
local streams = {high = KEYS[2], medium = KEYS[3], low = KEYS[4]}
local appended, duplicates = 0, 0
for i = 3, #ARGV, 5 do
  local priority, due, key, id, payload = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]),
                                          ARGV[i + 3], ARGV[i + 4]
  if key > 0 and redis.call('SET', KEYS[key], id, 'NX', 'GET', 'EX', ARGV[2]) then
    duplicates = duplicates + 1
  else
    if due ~= '' then
      redis.call('ZADD', KEYS[5], due, priority .. '|' .. payload)
      redis.call('HSET', KEYS[6], id, due)
    else
      redis.call('XADD', streams[priority], '*', 'd', payload)
    end
    appended = appended + 1
  end
end
return {1, appended, duplicates}
"""

# KEYS: rec, log, releasing, jobs, jobidx, prepared  ARGV: id, entry, ttl -> 1 if marked now
FINISH = (
    _LOG
    + _DROP
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'committed' then return 0 end
if redis.call('HGET', KEYS[1], 'released') == '1' then return 0 end
drop(KEYS[4], KEYS[5], KEYS[6])
redis.call('HSET', KEYS[1], 'released', '1')
redis.call('SREM', KEYS[3], ARGV[1])
note(KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""
)

# KEYS: rec, open  ARGV: id, now_ms, lease_ms -> the check's number, or 0 (not due / not open)
CLAIM_CHECK = """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 0 end
local at = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not at or tonumber(at) > tonumber(ARGV[2]) then return 0 end
local nxt = tonumber(ARGV[2]) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], nxt, ARGV[1])
redis.call('HSET', KEYS[1], 'next_check_ms', nxt)
return redis.call('HINCRBY', KEYS[1], 'checks', 1)
"""

# KEYS: rec, open, log  ARGV: id, next_ms, entry
NOTE_CHECK = (
    _LOG
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 0 end
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], 'next_check_ms', ARGV[2])
note(KEYS[3], ARGV[3])
return 1
"""
)

# KEYS: index, generations  ARGV: topic, at_ms: look at the topic by then
NOTE_TOPIC = """
redis.call('ZADD', KEYS[1], 'LT', ARGV[2], ARGV[1])
return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
"""

# KEYS: index, generations  ARGV: topic, now_ms, lease_ms -> the generation, or false
CLAIM_TOPIC = """
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not at or tonumber(at) > tonumber(ARGV[2]) then return false end
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
return redis.call('HGET', KEYS[2], ARGV[1]) or '0'
"""

# KEYS: index, generations  ARGV: topic, generation seen, next_ms or ''
SETTLE_TOPIC = """
local same = (redis.call('HGET', KEYS[2], ARGV[1]) or '0') == ARGV[2]
if same then
  if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1])
  else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
elseif ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[1], 'LT', ARGV[3], ARGV[1])
end
return 1
"""

_SCRIPTS = {
    "create": CREATE,
    "prepare": PREPARE,
    "decide": DECIDE,
    "release_group": RELEASE_GROUP,
    "finish": FINISH,
    "claim_check": CLAIM_CHECK,
    "note_check": NOTE_CHECK,
    "note_topic": NOTE_TOPIC,
    "claim_topic": CLAIM_TOPIC,
    "settle_topic": SETTLE_TOPIC,
}


def _entry(event: str, detail: str) -> str:
    return json.dumps({"at_ms": int(time.time() * 1000), "event": event, "detail": detail})


def _topic_of(name: str) -> TopicRef:
    ns, tenant, topic = name.split("/")
    return TopicRef(Namespace(ns), tenant, topic)


class RedisTransactionStore(OwnedClient, TransactionStore):
    """See the module docstring for the keys and why each step is safe."""

    def __init__(
        self,
        client: Client,
        keys: RedisKeys,
        *,
        owns_client: bool = False,
        idempotency_window_s: int = 86_400,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._keys = keys
        self._window = str(int(idempotency_window_s))
        self._wait = (wait_replicas, wait_timeout_ms) if wait_replicas > 0 else None
        self.health = BackendHealth()
        self._s: dict[str, AsyncScript] = {
            name: client.register_script(src) for name, src in _SCRIPTS.items()
        }
        self._calls = RedisCalls(client, tuple(self._s.values()), self.health)

    # ------------------------------------------------------------------ plumbing

    def _eval(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return ("EVALSHA", self._s[name].sha, len(keys), *keys, *args)

    async def _run(
        self, commands: Sequence[Command], what: str, *, repeatable: bool = True
    ) -> list[Any]:
        return await self._calls.pipeline(commands, what, repeatable=repeatable)

    async def _write(
        self, commands: Sequence[Command], what: str, *, repeatable: bool = True
    ) -> list[Any]:
        """``commands``, then (``EMQ_DURABILITY=replica``) WAIT on the same connection."""
        if self._wait is None:
            return await self._run(commands, what, repeatable=repeatable)
        replies = await self._run([*commands, ("WAIT", *self._wait)], what, repeatable=repeatable)
        check_acknowledged(int(replies[-1]), *self._wait)
        return replies[:-1]

    def _rec(self, topic: TopicRef, tx_id: str) -> str:
        return self._keys.transaction(topic, tx_id, "rec")

    def _part(self, topic: TopicRef, tx_id: str, part: str) -> str:
        return self._keys.transaction(topic, tx_id, part)

    def _t(self, topic: TopicRef, part: str) -> str:
        return self._keys.transactions(topic, part)

    async def _note_topic(self, topic: TopicRef, at_ms: int) -> None:
        k = self._keys
        command = self._eval("note_topic", (k.tx_index(), k.tx_index_generations()),
                             (str(topic), at_ms))  # fmt: skip
        await self._run([command], "transaction index")

    # ------------------------------------------------------------------ the producer's calls

    async def create(self, tx: Transaction, limits: TransactionLimits) -> None:
        fields: dict[str, Any] = {
            "topic": str(tx.topic),
            "check_url": tx.check_url,
            "timeout_s": tx.timeout_s,
            "created_ms": tx.created_ms,
            "state": tx.state.value,
            "jobs": 0,
            "next_check_ms": tx.next_check_ms,
            "checks": 0,
            "released": "0",
        }
        keys = (self._rec(tx.topic, tx.id), self._part(tx.topic, tx.id, "log"),
                self._t(tx.topic, "open"), self._t(tx.topic, "all"))  # fmt: skip
        entry = _entry("created", f"timeout {tx.timeout_s} s, check_url {tx.check_url}")
        args = [tx.id, limits.max_open, tx.created_ms, tx.next_check_ms, entry, KEEP]
        args += [x for kv in fields.items() for x in kv]
        # The index first: a topic looked at for nothing costs a read; one never looked at
        # would leave its transaction open forever.
        await self._note_topic(tx.topic, tx.next_check_ms)
        (result,) = await self._write([self._eval("create", keys, args)], "create transaction")
        if int(result) >= 0:
            raise TooManyTransactions(
                f"topic {tx.topic} has {int(result)} open transactions (at most {limits.max_open})",
                retry_after_s=1.0,
            )

    async def get(self, topic: TopicRef, tx_id: str) -> Transaction:
        rec, entries = await self._run(
            [("HGETALL", self._rec(topic, tx_id)),
             ("LRANGE", self._part(topic, tx_id, "log"), 0, -1)],
            "get transaction",
        )  # fmt: skip
        tx = _transaction(tx_id, topic, rec, entries)
        if tx is None:
            raise NotFound(f"no transaction {tx_id} in topic {topic}")
        return tx

    async def latest(self, topic: TopicRef, limit: int) -> list[Transaction]:
        (ids,) = await self._run([("ZREVRANGE", self._t(topic, "all"), 0, max(0, limit - 1))],
                                 "list transactions")  # fmt: skip
        ids = [text(i) for i in ids]
        recs = await self._run([("HGETALL", self._rec(topic, i)) for i in ids], "list transactions")
        found = (_transaction(i, topic, rec, []) for i, rec in zip(ids, recs, strict=True))
        return [tx for tx in found if tx is not None]

    async def prepare(
        self, topic: TopicRef, tx_id: str, items: Sequence[PutItem], limits: TransactionLimits
    ) -> Transaction:
        keys = (self._rec(topic, tx_id), self._part(topic, tx_id, "jobs"),
                self._t(topic, "jobidx"), self._t(topic, "prepared"),
                self._part(topic, tx_id, "log"))  # fmt: skip
        args: list[Any] = [tx_id, limits.max_jobs, _entry("prepared", f"{len(items)} jobs")]
        for item in items:
            args += (item.job_id, encode_prepared(item))
        # Not repeated after a broken connection: the jobs would be prepared twice.
        (reply,) = await self._write(
            [self._eval("prepare", keys, args)], "prepare jobs", repeatable=False
        )
        if int(reply[0]) == 1:
            return await self.get(topic, tx_id)
        why = text(reply[1])
        if why == "missing":
            raise NotFound(f"no transaction {tx_id} in topic {topic}")
        if why == "limit":
            raise PayloadTooLarge(
                "jobs",
                f"transaction {tx_id} has {int(reply[2])} jobs; at most {limits.max_jobs} in one",
            )
        tx = await self.get(topic, tx_id)
        raise TransactionClosed(f"transaction {tx_id} is {why}", tx)

    async def decide(
        self, topic: TopicRef, tx_id: str, state: TxState, source: Source, detail: str
    ) -> tuple[Transaction, bool]:
        now = int(time.time() * 1000)
        if state is TxState.COMMITTED:  # the index first, as in create
            await self._note_topic(topic, now)
        keys = (self._rec(topic, tx_id), self._part(topic, tx_id, "log"),
                self._t(topic, "open"), self._t(topic, "releasing"),
                self._part(topic, tx_id, "jobs"), self._t(topic, "jobidx"),
                self._t(topic, "prepared"))  # fmt: skip
        said = f"{state.value} by {source.value}" + (f": {detail}" if detail else "")
        args = (tx_id, state.value, source.value, detail, now, _entry("decided", said),
                DECIDED_TTL_S)  # fmt: skip
        (reply,) = await self._write([self._eval("decide", keys, args)], "decide transaction")
        if text(reply) == "missing":
            raise NotFound(f"no transaction {tx_id} in topic {topic}")
        return await self.get(topic, tx_id), text(reply) == "decided"

    async def release(self, topic: TopicRef, tx_id: str) -> Transaction:
        tx = await self.get(topic, tx_id)
        if tx.state is not TxState.COMMITTED or tx.released:
            return tx
        (raw,) = await self._run([("LRANGE", self._part(topic, tx_id, "jobs"), 0, -1)],
                                 "read prepared jobs")  # fmt: skip
        by_group: dict[int, list[PutItem]] = {}
        for element in raw:
            item = decode_prepared(topic, element)
            by_group.setdefault(item.queue.group.index, []).append(item)
        commands = [self._release_command(topic.group(g), tx_id, items)
                    for g, items in sorted(by_group.items())]  # fmt: skip
        replies = await self._write(commands, "release transaction")
        await self._hint([topic.group(g) for g in sorted(by_group)], replies, by_group)
        keys = (self._rec(topic, tx_id), self._part(topic, tx_id, "log"),
                self._t(topic, "releasing"), self._part(topic, tx_id, "jobs"),
                self._t(topic, "jobidx"), self._t(topic, "prepared"))  # fmt: skip
        entry = _entry("released", f"{tx.jobs} jobs in their queues")
        await self._write([self._eval("finish", keys, (tx_id, entry, DECIDED_TTL_S))],
                          "finish release")  # fmt: skip
        return await self.get(topic, tx_id)

    def _release_command(self, group: GroupRef, tx_id: str, items: Sequence[PutItem]) -> Command:
        k = self._keys
        keys = [k.tx_released(group, tx_id),
                *(k.stream(group.queue(p)) for p in (Priority.HIGH, Priority.MEDIUM, Priority.LOW)),
                k.delayed(group), k.job_due(group)]  # fmt: skip
        args: list[Any] = [MARKER_TTL_S, self._window]
        for item in items:
            index = 0
            if item.idempotency_key is not None:
                keys.append(k.idempotency(group, item.idempotency_key))
                index = len(keys)
            due = "" if item.due_ms is None else str(int(item.due_ms))
            args += (item.queue.priority.value, due, index, item.job_id, item.payload)
        return self._eval("release_group", keys, args)

    async def _hint(
        self, groups: list[GroupRef], replies: list[Any], items: dict[int, list[PutItem]]
    ) -> None:
        """Wake the workers of the groups appended to (a lost hint only waits for their
        sweep, as with a put)."""
        ready, due = [], {}
        for group, (done, appended, _) in zip(groups, replies, strict=True):
            if not int(done) or not int(appended):
                continue
            times = [i.due_ms for i in items[group.index] if i.due_ms is not None]
            if times:
                due[str(group)] = min(times)
            if len(times) < len(items[group.index]):
                ready.append(str(group))
        commands: list[Command] = []
        if due:
            pairs = [x for name, at in due.items() for x in (at, name)]
            commands.append(("ZADD", self._keys.due_index(), "LT", *pairs))
        if ready:
            commands.append(("XADD", self._keys.ready(), "MAXLEN", "~", READY_MAXLEN, "*",
                             "g", "\n".join(ready)))  # fmt: skip
        try:
            await self._run(commands, "transaction signal")
        except Exception as e:  # the jobs are stored; the workers' sweep finds them
            log.warning("could not signal %s after a transaction's release: %s", ready, e)

    async def prepared_jobs(self, topic: TopicRef) -> int:
        (n,) = await self._run([("GET", self._t(topic, "prepared"))], "prepared jobs")
        return max(0, int(n or 0))

    async def find_job(self, topic: TopicRef, job_id: str) -> str | None:
        (tx_id,) = await self._run([("HGET", self._t(topic, "jobidx"), job_id)], "find job")
        return None if tx_id is None else text(tx_id)

    # ------------------------------------------------------------------ the runner's calls

    async def due_topics(self, now_ms: int, limit: int) -> list[TopicRef]:
        command = ("ZRANGEBYSCORE", self._keys.tx_index(), "-inf", now_ms, "LIMIT", 0, limit)
        (names,) = await self._run([command], "due transactions")
        return [_topic_of(text(n)) for n in names]

    async def claim_topic(self, topic: TopicRef, now_ms: int, lease_ms: int) -> TopicClaim | None:
        k = self._keys
        command = self._eval("claim_topic", (k.tx_index(), k.tx_index_generations()),
                             (str(topic), now_ms, lease_ms))  # fmt: skip
        (generation,) = await self._run([command], "claim topic")
        return None if generation is None else TopicClaim(topic, text(generation))

    async def pending(self, topic: TopicRef, now_ms: int) -> Pending:
        open_key = self._t(topic, "open")
        due, releasing, later = await self._run(
            [("ZRANGEBYSCORE", open_key, "-inf", now_ms, "LIMIT", 0, 100),
             ("SMEMBERS", self._t(topic, "releasing")),
             ("ZRANGEBYSCORE", open_key, f"({now_ms}", "+inf", "LIMIT", 0, 1, "WITHSCORES")],
            "pending transactions",
        )  # fmt: skip
        next_ms = int(float(later[0][1])) if later else None
        return [text(i) for i in due], sorted(text(i) for i in releasing), next_ms

    async def settle_topic(self, claim: TopicClaim, next_ms: int | None) -> None:
        k = self._keys
        args = (str(claim.topic), claim.generation, "" if next_ms is None else next_ms)
        command = self._eval("settle_topic", (k.tx_index(), k.tx_index_generations()), args)
        await self._run([command], "settle topic")

    async def claim_check(
        self, topic: TopicRef, tx_id: str, now_ms: int, lease_ms: int
    ) -> Transaction | None:
        keys = (self._rec(topic, tx_id), self._t(topic, "open"))
        command = self._eval("claim_check", keys, (tx_id, now_ms, lease_ms))
        (n,) = await self._write([command], "claim check-back")
        return await self.get(topic, tx_id) if int(n) else None

    async def note_check(self, topic: TopicRef, tx_id: str, next_ms: int, detail: str) -> None:
        keys = (self._rec(topic, tx_id), self._t(topic, "open"), self._part(topic, tx_id, "log"))
        command = self._eval("note_check", keys, (tx_id, next_ms, _entry("check", detail)))
        await self._write([command], "note check-back")


def _transaction(tx_id: str, topic: TopicRef, raw: Any, entries: Any) -> Transaction | None:
    f = {text(k): text(v) for k, v in (raw or {}).items()}
    if "state" not in f or f.get("topic") != str(topic):
        return None
    lines = [json.loads(text(e)) for e in entries or ()]
    return Transaction(
        id=tx_id,
        topic=topic,
        check_url=f.get("check_url", ""),
        timeout_s=int(f.get("timeout_s") or 0),
        created_ms=int(f.get("created_ms") or 0),
        state=TxState(f["state"]),
        jobs=int(f.get("jobs") or 0),
        next_check_ms=int(float(f.get("next_check_ms") or 0)),
        checks=int(f.get("checks") or 0),
        decided_ms=int(f["decided_ms"]) if f.get("decided_ms") else None,
        source=Source(f["source"]) if f.get("source") else None,
        detail=f.get("detail", ""),
        released=f.get("released") == "1",
        log=tuple(LogEntry(int(e["at_ms"]), str(e["event"]), str(e["detail"])) for e in lines),
    )
