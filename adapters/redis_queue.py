"""Physical queues on Redis Streams, for a standalone Redis or a Redis Cluster.

Layout (keys from :class:`~emq.core.naming.RedisKeys`; every key of a group shares its hash tag,
so a group lives on one Cluster slot and each Lua script touches one slot only; the scripts and the
formats they share with the in-memory backend are in :mod:`adapters._redis_scripts`):

* ``stream(queue)``: the queue's log; one field ``d`` per entry holds the payload. Created by the
  first XADD, so a queue that never got a job costs no key.
* ``checkpoint(queue)``: hash ``{o: offset, e: epoch, n: entries committed so far}``.
* ``epoch(group)``: the owner epoch; checkpoints, trims and dead letters carrying an older one are
  refused (:class:`~emq.core.errors.Fenced`) inside the same script that would write.
* ``delayed(group)``: sorted set of ``<priority>|<payload>`` scored by due epoch milliseconds.
* ``dlq(group)``: stream of dead letters (fields priority, payload, error, status, attempts,
  failed_at), trimmed to the topic's retention (newest ``dlq_max_entries``, none older than
  ``dlq_max_age_s``) by each append and by :meth:`trim_dead`.
* ``idempotency(group, key)``: ``SET NX EX window`` marker holding the first job id.
* ``job_due(group)``: hash job id -> due time of each job parked by a put with a due time,
  removed when it is promoted (the job status lookup's way to a delayed job; see
  :mod:`adapters.redis_jobs`).

Two global keys, outside every group's hash tag, carry hints for the workers (never passed to a
script with group keys, so a Cluster never answers CROSSSLOT):

* ``ready()``: a stream (capped at ~:data:`READY_MAXLEN` entries); each write that appends jobs
  (put, promote_due, replay_dead) adds one entry whose field ``g`` holds the names
  (``str(GroupRef)``, one per line) of the groups it appended to. :meth:`wait_ready` blocks on it
  (XREAD BLOCK) on a dedicated client, so a worker owning 10 000 queues never polls idle ones.
* ``due_index()``: a sorted set, member ``str(GroupRef)``, score the earliest due time of the
  group's delayed set (or earlier: a stale entry is harmless, :meth:`reindex_delayed` refreshes it).

Hints are not atomic with the writes they announce (they live on another slot): they are sent
after them (on a standalone server in the same pipeline, which one server runs in order; on a
Cluster in a second round trip, since a pipeline's nodes run concurrently), so a worker woken by
one finds the work. A lost hint (a failure between the two) only delays the work until the
worker's periodic sweep, so a failed hint is logged, not raised.

Backlog is ``entries-added`` (XINFO STREAM, Redis >= 7.0) minus the checkpoint's committed count,
which stays right after trims. Every many-queue call is one pipeline (``transaction=False``; a
Cluster pipeline splits by node). A put sends its plain items as one APPEND script per Cluster
slot (one in all on a standalone server) rather than one XADD each: redis-py spends ~20 us of
Python per pipelined command, which would cap a 2-core API far below 30k jobs/s; jobs with an
idempotency key or a due time take one PUT script each. Scripts run by EVALSHA; a node that lost
its script cache (restart, failover) answers NOSCRIPT, and those commands, which did not run, are
re-sent once after SCRIPT LOAD.

Driver errors are translated at the seam (:mod:`adapters.redis_conn`, which also says how
clients survive restarts and failovers), and :attr:`RedisQueueBackend.health` records what the
last call found (for the health endpoints). A put that fails half-way may have stored part of
the batch; retrying it is at-least-once (idempotency keys de-duplicate the retry). The packing
of script arguments and the decoding of replies are in :mod:`adapters.redis_replies`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from adapters import _redis_scripts as lua
from adapters.redis_conn import (
    Client,
    RedisCalls,
    blocking_twin,
    check_acknowledged,
    client_options,
    conf,
    translated,
)
from adapters.redis_replies import (
    Append,
    BatchItem,
    Command,
    Hints,
    QueueKeys,
    counts_of,
    cursor_of,
    dead_letter_of,
    dlq_id,
    entries_of,
    offset_of,
    put_result,
    ready_names,
    retention_args,
    score_pairs,
    text,
)
from emq.core.errors import BackendUnavailable, ConfigError, Fenced
from emq.core.interfaces import (
    BackendHealth,
    Checkpoint,
    DeadLetter,
    Entry,
    Offset,
    PutItem,
    PutResult,
    QueueBackend,
    Scheduled,
)
from emq.core.model import DLQ_DEFAULTS, DlqRetention, GroupRef, Priority, QueueRef
from emq.core.naming import RedisKeys

log = logging.getLogger(__name__)

_Slot: TypeAlias = tuple[int, int]
_T = TypeVar("_T")


DEFAULT_IDEMPOTENCY_WINDOW_S = 86_400


READY_MAXLEN = 100_000  # signals kept (approximately): a worker further behind relies on its sweep
_BATCH_ITEMS = 500  # items per batch script: bounds how long one script holds the server
_READ_QUEUES = 128  # queues per READ script (each up to a fetch's count of entries)
_KEY_CACHE_MAX = 50_000  # queues whose batch-script keys are cached (a worker owns far fewer)
_BLOCK_GRACE_S = 2.0  # a blocking read not answered this long after its BLOCK time: server hung


class RedisQueueBackend(QueueBackend):
    """:class:`~emq.core.interfaces.QueueBackend` on Redis Streams (standalone or Cluster client).

    Takes ownership of ``client`` and ``blocking_client``: :meth:`aclose` closes them.
    ``blocking_client`` (made by :func:`connect`, with no socket timeout) serves the blocking
    reads of :meth:`wait_ready`; without it one is derived from a standalone ``client``'s pool,
    and a Cluster ``client`` is shared (its socket timeout must then exceed the wait).
    """

    def __init__(
        self,
        client: Client,
        keys: RedisKeys,
        *,
        idempotency_window_s: int = DEFAULT_IDEMPOTENCY_WINDOW_S,
        blocking_client: Client | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        if idempotency_window_s <= 0:
            raise ValueError("idempotency_window_s must be greater than 0")
        if wait_replicas and isinstance(client, RedisCluster):
            # WAIT counts the replicas of the node it is sent to, and a put spans many nodes.
            raise ConfigError("EMQ_DURABILITY=replica needs a standalone Redis, not a Cluster")
        self._wait = (wait_replicas, wait_timeout_ms) if wait_replicas > 0 else None
        self._client = client
        # wait_ready's XREAD BLOCK holds a connection for seconds: on its own client it neither
        # takes the main pool's connections nor trips the main client's socket timeout.
        self._blocking = blocking_client or blocking_twin(client)
        self._keys = keys
        self._window = str(int(idempotency_window_s))
        self._cluster = isinstance(client, RedisCluster)
        self._key_cache: dict[QueueRef, QueueKeys] = {}
        self._holder_keys: dict[GroupRef, tuple[str, str]] = {}
        self._closed = False
        self.health = BackendHealth()
        register = client.register_script
        self._append = register(lua.APPEND)
        self._read = register(lua.READ)
        self._put = register(lua.PUT)
        self._claim = register(lua.CLAIM)
        self._release_holds = register(lua.RELEASE_HOLDS)
        self._write_checkpoints = register(lua.WRITE_CHECKPOINTS)
        self._trim_many = register(lua.TRIM_MANY)
        self._schedule = register(lua.SCHEDULE)
        self._earliest = register(lua.EARLIEST_DUE)
        self._backlog = register(lua.BACKLOG)
        self._promote = register(lua.PROMOTE_DUE)
        self._dead_letter = register(lua.DEAD_LETTER)
        self._trim_dead = register(lua.TRIM_DEAD)
        self._replay = register(lua.REPLAY_DEAD)
        self._scripts = (
            self._append,
            self._read,
            self._put,
            self._claim,
            self._release_holds,
            self._write_checkpoints,
            self._trim_many,
            self._schedule,
            self._earliest,
            self._backlog,
            self._promote,
            self._dead_letter,
            self._trim_dead,
            self._replay,
        )
        self._calls = RedisCalls(client, self._scripts, self.health)

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _eval(script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    async def load_scripts(self) -> None:
        """Load every script into Redis (on a Cluster client, into every primary)."""
        await self._calls.load_scripts()

    async def _pipeline(
        self, commands: Sequence[Command], what: str, *, repeatable: bool = True
    ) -> list[Any]:
        return await self._calls.pipeline(commands, what, repeatable=repeatable)

    async def _call(self, command: Command, what: str, *, repeatable: bool = True) -> Any:
        return (await self._calls.pipeline([command], what, repeatable=repeatable))[0]

    def _group_streams(self, group: GroupRef) -> tuple[str, str, str]:
        """The high, medium and low streams, in the order the scripts expect them."""
        keys = self._keys
        return (
            keys.stream(group.queue(Priority.HIGH)),
            keys.stream(group.queue(Priority.MEDIUM)),
            keys.stream(group.queue(Priority.LOW)),
        )

    @staticmethod
    def _fenced_result(reply: Any, group: GroupRef, epoch: int, what: str) -> Any:
        """The result of a fenced script, or :class:`Fenced` if a newer owner claimed ``group``."""
        ok, value = reply
        if not ok:
            raise Fenced(f"{what} on {group} with epoch {epoch}: group is at epoch {value}")
        return value

    async def ping(self) -> None:
        await self._call(("PING",), "ping")

    async def persistence(self) -> list[tuple[str, str, str]]:
        """(node, ``appendonly``, ``appendfsync``) of the server, or of every Cluster primary.

        :class:`~emq.core.errors.ConfigError` if the server refuses CONFIG GET (renamed or ACL'd).
        """
        with translated("config get"):
            try:
                if isinstance(self._client, RedisCluster):
                    found = [
                        (n.name, await self._client.config_get("append*", target_nodes=n))
                        for n in self._client.get_primaries()
                    ]
                else:
                    found = [("redis", await self._client.config_get("append*"))]
            except rex.ResponseError as e:
                raise ConfigError(f"cannot read the Redis persistence settings: {e}") from e
        return [(node, conf(c, "appendonly"), conf(c, "appendfsync")) for node, c in found]

    # ------------------------------------------------------------------ puts and reads

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        """Store ``items``; then signal the groups appended to and index the delayed ones.

        The hints of items without an idempotency key are known before sending; those of the
        others wait for the replies, since a duplicate announces nothing.
        """
        commands, slots, hints = self._put_commands(items)
        if not self._cluster:  # one server runs the pipeline in order: hints land after the jobs
            commands += self._hint_commands(hints)
            hints = Hints()
        if self._wait is not None:  # on the same connection: waits for the writes above
            commands.append(("WAIT", *self._wait))
        # A put without idempotency keys is not sent twice: had the first one reached Redis
        # before the connection broke, the jobs would be stored twice (the caller gets
        # BackendUnavailable and may retry with keys); with keys, Redis de-duplicates.
        repeatable = all(item.idempotency_key is not None for item in items)
        replies = await self._pipeline(commands, "put", repeatable=repeatable)
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

    def _slot(self, key: str) -> int:
        """The key's Cluster slot; 0 on a standalone server, where any keys may go together."""
        return key_slot(key.encode()) if self._cluster else 0

    def _put_script(self, item: PutItem, stream: str) -> Command:
        group = item.queue.group
        keys = [stream, self._keys.delayed(group), self._keys.job_due(group)]
        if item.idempotency_key is not None:
            keys.append(self._keys.idempotency(group, item.idempotency_key))
        due = "" if item.due_ms is None else str(int(item.due_ms))
        args = (item.job_id, item.payload, due, item.queue.priority.value, self._window)
        return self._eval(self._put, keys, args)

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

    async def backlog(self, queues: Sequence[QueueRef]) -> list[int]:
        keys = self._keys
        commands = [
            self._eval(self._backlog, (keys.stream(q), keys.checkpoint(q)), ()) for q in queues
        ]
        return [int(n) for n in await self._pipeline(commands, "backlog")]

    # ------------------------------------------------------------------ delayed jobs

    async def delayed(self, groups: Sequence[GroupRef]) -> list[int]:
        commands = [("ZCARD", self._keys.delayed(g)) for g in groups]
        return [int(n) for n in await self._pipeline(commands, "delayed")]

    async def promote_due(self, group: GroupRef, now_ms: int, limit: int) -> int:
        if limit <= 0:
            return 0
        keys = (self._keys.delayed(group), *self._group_streams(group), self._keys.job_due(group))
        moved = await self._call(self._eval(self._promote, keys, (now_ms, limit)), "promote_due")
        if moved:
            log.debug("promoted %d due jobs of %s", moved, group)
            await self._send_hints(Hints.ready_of(group), "promote_due")
        return int(moved)

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
        index = self._keys.due_index()
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

    # ------------------------------------------------------------------ ownership and progress

    async def claim(self, group: GroupRef, epoch: int, holder: str = "") -> bool:
        keys = (self._keys.epoch(group), self._keys.holder(group))
        reply = await self._call(self._eval(self._claim, keys, (epoch, holder)), "claim")
        previous = text(self._fenced_result(reply, group, epoch, "claim"))
        return previous not in ("", holder)

    async def release_holds(self, groups: Sequence[GroupRef], holder: str) -> None:
        holders = [self._keys.holder(g) for g in groups]
        chunks = self._per_slot(holders, self._slot)
        commands = [self._eval(self._release_holds, chunk, (holder,)) for chunk in chunks]
        await self._pipeline(commands, "release_holds")

    async def check_holds(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str
    ) -> set[GroupRef]:
        """One MGET of the groups' holder and epoch keys (per Cluster slot, pipelined)."""
        wanted = holder.encode()
        keys = [self._hold_keys(g) for g, _ in groups]
        chunks = self._per_slot(range(len(groups)), lambda i: self._slot(keys[i][0]))
        commands = [("MGET", *(k for i in chunk for k in keys[i])) for chunk in chunks]
        lost = set()
        for chunk, reply in zip(chunks, await self._pipeline(commands, "check_holds"), strict=True):
            for n, i in enumerate(chunk):
                found, epoch = reply[2 * n], reply[2 * n + 1]
                group, mine = groups[i]
                if (found is not None and found != wanted) or int(epoch or 0) > mine:
                    lost.add(group)
        return lost

    def _hold_keys(self, group: GroupRef) -> tuple[str, str]:
        """The holder and epoch keys of ``group``, cached: a worker checks all its groups
        several times a second, and spelling the keys costs more than reading them."""
        keys = self._holder_keys.get(group)
        if keys is None:
            if len(self._holder_keys) >= _KEY_CACHE_MAX:
                self._holder_keys.clear()
            keys = self._holder_keys[group] = (self._keys.holder(group), self._keys.epoch(group))
        return keys

    async def read_checkpoint(self, queue: QueueRef) -> Checkpoint | None:
        offset, epoch = await self._call(
            ("HMGET", self._keys.checkpoint(queue), "o", "e"), "read_checkpoint"
        )
        if offset is None:
            return None
        return Checkpoint(offset_of(offset), int(epoch))

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

    async def trim_many(self, items: Sequence[tuple[QueueRef, int, int]]) -> set[GroupRef]:
        """Many trims, (queue, epoch, retain) each, in one round trip.

        Returns the groups with a fenced item (those items trimmed nothing); never raises Fenced.
        """
        batch = [(q.group, self._queue_keys(q), f"{e} {max(0, r)}") for q, e, r in items]
        return await self._fenced_batch(self._trim_many, batch, "trim_many")

    def _queue_keys(self, queue: QueueRef) -> QueueKeys:
        """The keys a batch script needs for ``queue``, cached: a worker commits the queues it
        owns every second, and spelling three keys costs more than the rest of the call."""
        known = self._key_cache.get(queue)
        if known is None:
            if len(self._key_cache) >= _KEY_CACHE_MAX:
                self._key_cache.clear()
            k = self._keys
            stream = k.stream(queue)
            known = QueueKeys(stream, k.checkpoint(queue), k.epoch(queue.group), self._slot(stream))
            self._key_cache[queue] = known
        return known

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

    def _per_slot(
        self, items: Iterable[_T], slot: Callable[[_T], int], size: int = _BATCH_ITEMS
    ) -> list[list[_T]]:
        """``items`` gathered per Cluster slot, in order, in chunks of ``size``."""
        per_slot: dict[int, list[_T]] = {}
        for item in items:
            per_slot.setdefault(slot(item), []).append(item)
        return [
            same[start : start + size]
            for same in per_slot.values()
            for start in range(0, len(same), size)
        ]

    # ------------------------------------------------------------------ dead letters

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

    # ------------------------------------------------------------------ hints for the workers

    def _hint_commands(self, hints: Hints) -> list[Command]:
        """The due-index and ready-signal writes of ``hints``: single-key global commands."""
        commands: list[Command] = []
        if hints.due:
            commands.append(("ZADD", self._keys.due_index(), "LT", *score_pairs(hints.due)))
        if hints.ready:
            names = "\n".join(hints.ready)
            ready = self._keys.ready()
            commands.append(("XADD", ready, "MAXLEN", "~", READY_MAXLEN, "*", "g", names))
        return commands

    async def _send_hints(self, hints: Hints, what: str) -> None:
        """Send ``hints`` after the writes they announce; a failure only delays the work."""
        commands = self._hint_commands(hints)
        if not commands:
            return
        try:
            await self._pipeline(commands, what)
        except BackendUnavailable as e:
            # The writes are done; the workers' periodic sweep finds them without the hint.
            log.warning("could not signal %s after %s: %s", hints, what, e)

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
        block = max(1, round(timeout_s * 1000)) if timeout_s > 0 else None
        try:
            async with asyncio.timeout(max(0.0, timeout_s) + _BLOCK_GRACE_S):
                with translated("wait_ready"):
                    after = await self._ready_tail(key) if cursor is None else cursor_of(cursor)
                    reply = await self._blocking.xread({key: after}, max(1, count), block)
        except TimeoutError as e:  # the server took the command but never answered
            self.health.failed(f"no answer to a blocking read of {key}")
            raise BackendUnavailable(f"redis did not answer a blocking read of {key}") from e
        except BackendUnavailable as e:
            self.health.failed(e.message)
            raise
        self.health.ok()
        return ready_names(reply, after)

    async def _ready_tail(self, key: str) -> str:
        """The newest signal's id, or ``0-0`` if none: every later signal sorts after it."""
        newest: Any = await self._blocking.xrevrange(key, "+", "-", 1)
        return text(newest[0][0]) if newest else "0-0"

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._blocking is not self._client:
                await self._blocking.aclose()
        finally:
            await self._client.aclose()


async def connect(url: str, *, cluster: bool, prefix: str, **opts: Any) -> RedisQueueBackend:
    """Connect to ``url`` (one node of a Cluster if ``cluster``) and return a backend on it.

    ``opts`` go to :class:`RedisQueueBackend` when they are its own (``idempotency_window_s``)
    and to the redis client otherwise (timeouts, retries; see :func:`client_options`). Loading
    the scripts checks that Redis answers: an unreachable one is
    :class:`~emq.core.errors.BackendUnavailable` here, not later.
    """
    window = opts.pop("idempotency_window_s", DEFAULT_IDEMPOTENCY_WINDOW_S)
    wait = {k: opts.pop(k) for k in ("wait_replicas", "wait_timeout_ms") if k in opts}
    opts = client_options(cluster, **opts)
    make = RedisCluster.from_url if cluster else aioredis.Redis.from_url
    client: Client = make(url, **opts)
    # Blocking reads are bounded by their BLOCK time (and wait_ready's own deadline).
    blocking: Client = make(url, **{**opts, "socket_timeout": None})
    try:
        backend = RedisQueueBackend(
            client, RedisKeys(prefix), idempotency_window_s=window, blocking_client=blocking, **wait
        )
    except BaseException:
        await blocking.aclose()
        await client.aclose()
        raise
    try:
        await backend.load_scripts()
    except BaseException:
        await backend.aclose()
        raise
    return backend
