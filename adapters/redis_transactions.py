"""Transactions on Redis (:class:`~emq.core.transactions.TransactionStore`).

Keys (:class:`~emq.core.naming.RedisKeys`), all of one topic in the topic's own hash tag:

* ``transaction(topic, id, "rec")``: hash, the transaction (topic, check_url, timeout_s,
  created_ms, state, jobs, next_check_ms, checks, decided_ms, source, detail, released);
  ``(.., "jobs")``: list, its prepared jobs (:func:`~emq.core.transactions.encode_prepared`);
  ``(.., "log")``: list of JSON lines, what happened (the newest ``LOG_MAX``).
* ``transactions(topic, "open")``: zset open id -> next check ms; ``"releasing"``: set of
  committed ids not released yet; ``"all"``: zset id -> created ms (the newest ``KEEP``);
  ``"jobidx"``: hash, a job id's time stamp -> the transactions that prepared jobs with it
  (job status; see :data:`PREPARE`); ``"prepared"``: the count of
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
    encode_prepared,
    prepared_head,
)

log = logging.getLogger(__name__)

KEEP = 1000  # transactions listed per topic (older ones stay readable by id until they expire)
MARKER_TTL_S = 2 * DECIDED_TTL_S
READY_MAXLEN = 100_000  # as adapters.redis_queue's ready stream
KEY_BASE = 6  # RELEASE_GROUP's KEYS before the idempotency keys
STAMP = 14  # "msg_" and the 10 characters of a job id's enqueue time (see emq.core.jobs)

# Deletes a transaction's prepared jobs, their job index entries and their count.
# Deletes the prepared jobs of transaction ``id`` (its record ``rec``), their count, and the
# transaction from the job index entries of its prepares.
_DROP = """
local function drop(rec, id, jobs, index, count)
  local n = redis.call('LLEN', jobs)
  redis.call('DEL', jobs)
  if n > 0 then redis.call('DECRBY', count, n) end
  for stamp in string.gmatch(redis.call('HGET', rec, 'stamps') or '', '%S+') do
    local left = {}
    for tx in string.gmatch(redis.call('HGET', index, stamp) or '', '%S+') do
      if tx ~= id then left[#left + 1] = tx end
    end
    if #left > 0 then redis.call('HSET', index, stamp, table.concat(left, ' '))
    else redis.call('HDEL', index, stamp) end
  end
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

# KEYS: rec, jobs, jobidx, prepared, log  ARGV: id, max_jobs, entry, n, lengths, elements,
# stamps -> {1, jobs now} | {0, state} not open | {0, 'missing'} | {0, 'limit', jobs now}
# The n elements come concatenated in one argument, their lengths in another ("12,40,..."): two
# arguments for the batch, as the producer's APPEND (redis-py spends ~1 us per argument).
# The job index maps each job id's time stamp (its first 14 characters, the same for every job
# placed together) to the transactions that prepared jobs with it: one field per prepare, not
# one per job (a status lookup then looks through those transactions' jobs).
PREPARE = (
    _LOG
    + """
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return {0, 'missing'} end
if st ~= 'open' then return {0, st} end
local n = tonumber(ARGV[4])
local have = tonumber(redis.call('HGET', KEYS[1], 'jobs') or '0')
if have + n > tonumber(ARGV[2]) then return {0, 'limit', have} end
local els = {}
local at = 1
for len in string.gmatch(ARGV[5], '%d+') do
  local stop = at + tonumber(len)
  els[#els + 1] = string.sub(ARGV[6], at, stop - 1)
  at = stop
  if #els == 500 then redis.call('RPUSH', KEYS[2], unpack(els)) els = {} end
end
if #els > 0 then redis.call('RPUSH', KEYS[2], unpack(els)) end
local stamps = ' ' .. (redis.call('HGET', KEYS[1], 'stamps') or '') .. ' '
for stamp in string.gmatch(ARGV[7], '%S+') do
  if not string.find(stamps, ' ' .. stamp .. ' ', 1, true) then
    stamps = stamps .. stamp .. ' '
    local txs = redis.call('HGET', KEYS[3], stamp)
    redis.call('HSET', KEYS[3], stamp, txs and (txs .. ' ' .. ARGV[1]) or ARGV[1])
  end
end
redis.call('HSET', KEYS[1], 'stamps', stamps)
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
  drop(KEYS[1], ARGV[1], KEYS[5], KEYS[6], KEYS[7])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('EXPIRE', KEYS[2], ARGV[7])
end
return 'decided'
"""
)

# KEYS: marker, high, medium, low, delayed, job_due, idempotency keys...
# ARGV: marker_ttl, idempotency window, lengths, elements (as PREPARE's), and per element the
# index in KEYS of its idempotency key or 0 ("0,0,7,...") -> {1, appended, duplicates} |
# {0, 0, 0} done before. The marker and the appends are one step: the group gets all of the
# transaction's jobs at once, and only once.
RELEASE_GROUP = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return {0, 0, 0} end
local streams = {high = KEYS[2], medium = KEYS[3], low = KEYS[4]}
local appended, duplicates = 0, 0
local keys = string.gmatch(ARGV[5], '%d+')
local at = 1
for len in string.gmatch(ARGV[3], '%d+') do
  local stop = at + tonumber(len)
  local el = string.sub(ARGV[4], at, stop - 1)
  at = stop
  local key = tonumber(keys())
  local id, priority, due, n, start = string.match(el, '^(%S+) %d+ (%a+) (%S+) (%d+) ()')
  local payload = string.sub(el, start + tonumber(n))
  if key > 0 and redis.call('SET', KEYS[key], id, 'NX', 'GET', 'EX', ARGV[2]) then
    duplicates = duplicates + 1
  else
    if due ~= '-' then
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
drop(KEYS[1], ARGV[1], KEYS[4], KEYS[5], KEYS[6])
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

# KEYS: jobs  ARGV: "<job id> " -> 1 if one of the prepared jobs is that one
FIND = """
local n = redis.call('LLEN', KEYS[1])
local start = 0
while start < n do
  for _, el in ipairs(redis.call('LRANGE', KEYS[1], start, start + 999)) do
    if string.sub(el, 1, #ARGV[1]) == ARGV[1] then return 1 end
  end
  start = start + 1000
end
return 0
"""

_SCRIPTS = {
    "find": FIND,
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


class _Share:
    """One group's part of a release: its prepared elements, the idempotency keys they name,
    and what the workers are told (appended to a stream, parked until a due time)."""

    def __init__(self, group: GroupRef) -> None:
        self.group = group
        self.elements: list[bytes] = []
        self.keys: list[str] = []
        self.key_index: list[str] = []
        self.due_ms: int | None = None
        self.immediate = False

    def add(self, element: bytes, due: int | None, key: str | None, naming: RedisKeys) -> None:
        """Add one element (see :func:`~emq.core.transactions.encode_prepared`) with what its
        head says."""
        self.elements.append(element)
        if key is None:
            self.key_index.append("0")
        else:
            self.keys.append(naming.idempotency(self.group, key))
            self.key_index.append(str(KEY_BASE + len(self.keys)))
        if due is None:
            self.immediate = True
        else:
            self.due_ms = due if self.due_ms is None else min(self.due_ms, due)

    def command(self, store: RedisTransactionStore, tx_id: str) -> Command:
        k = store._keys
        keys = [k.tx_released(self.group, tx_id),
                *(k.stream(self.group.queue(p)) for p in (Priority.HIGH, Priority.MEDIUM,
                                                          Priority.LOW)),
                k.delayed(self.group), k.job_due(self.group), *self.keys]  # fmt: skip
        lengths = ",".join([str(len(e)) for e in self.elements])
        args = (MARKER_TTL_S, store._window, lengths, b"".join(self.elements),
                ",".join(self.key_index))  # fmt: skip
        return store._eval("release_group", keys, args)


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
    ) -> int:
        keys = (self._rec(topic, tx_id), self._part(topic, tx_id, "jobs"),
                self._t(topic, "jobidx"), self._t(topic, "prepared"),
                self._part(topic, tx_id, "log"))  # fmt: skip
        elements = [encode_prepared(item) for item in items]
        lengths = ",".join([str(len(e)) for e in elements])
        entry = _entry("prepared", f"{len(items)} jobs")
        stamps = " ".join(dict.fromkeys(item.job_id[:STAMP] for item in items))
        args = (tx_id, limits.max_jobs, entry, len(elements), lengths, b"".join(elements), stamps)
        # Not repeated after a broken connection: the jobs would be prepared twice.
        (reply,) = await self._write(
            [self._eval("prepare", keys, args)], "prepare jobs", repeatable=False
        )
        if int(reply[0]) == 1:
            return int(reply[1])
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
        (state, released, jobs), raw = await self._run(
            [("HMGET", self._rec(topic, tx_id), "state", "released", "jobs"),
             ("LRANGE", self._part(topic, tx_id, "jobs"), 0, -1)],
            "read prepared jobs",
        )  # fmt: skip
        # (jobs prepared after the state was read cannot exist: the state is final)
        state, released = text(state or b""), text(released or b"") == "1"
        if state != "committed" or released:
            return await self.get(topic, tx_id)
        shares: dict[int, _Share] = {}
        for element in raw:
            group, due, key = prepared_head(element)
            share = shares.get(group)
            if share is None:
                share = shares[group] = _Share(topic.group(group))
            share.add(element, due, key, self._keys)
        order = sorted(shares)
        commands = [shares[g].command(self, tx_id) for g in order]
        replies = await self._write(commands, "release transaction")
        await self._hint([shares[g] for g in order], replies)
        keys = (self._rec(topic, tx_id), self._part(topic, tx_id, "log"),
                self._t(topic, "releasing"), self._part(topic, tx_id, "jobs"),
                self._t(topic, "jobidx"), self._t(topic, "prepared"))  # fmt: skip
        entry = _entry("released", f"{int(jobs or 0)} jobs in their queues")
        await self._write([self._eval("finish", keys, (tx_id, entry, DECIDED_TTL_S))],
                          "finish release")  # fmt: skip
        return await self.get(topic, tx_id)

    async def _hint(self, shares: list[_Share], replies: list[Any]) -> None:
        """Wake the workers of the groups appended to (a lost hint only waits for their
        sweep, as with a put)."""
        ready, due = [], {}
        for share, (done, appended, _) in zip(shares, replies, strict=True):
            if not int(done) or not int(appended):
                continue
            if share.due_ms is not None:
                due[str(share.group)] = share.due_ms
            if share.immediate:
                ready.append(str(share.group))
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

    async def counts(self, topics: Sequence[TopicRef]) -> list[tuple[int, int]]:
        commands: list[Command] = []
        for topic in topics:
            commands += [("ZCARD", self._t(topic, "open")), ("GET", self._t(topic, "prepared"))]
        replies = await self._run(commands, "transaction counts")
        pairs = zip(replies[::2], replies[1::2], strict=True)
        return [(int(n), max(0, int(jobs or 0))) for n, jobs in pairs]

    async def find_job(self, topic: TopicRef, job_id: str) -> str | None:
        stamp = job_id[:STAMP]
        (found,) = await self._run([("HGET", self._t(topic, "jobidx"), stamp)], "find job")
        for tx_id in text(found or b"").split():
            keys = (self._part(topic, tx_id, "jobs"),)
            command = self._eval("find", keys, (job_id + " ",))
            if int((await self._run([command], "find job"))[0]):
                return tx_id
        return None

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
