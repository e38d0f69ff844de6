"""What every role of the Redis queue backend shares: clients, scripts, pipelines, slots, hints.

:class:`RedisQueueBase` holds the clients and the key naming, registers the Lua scripts each
role declares (:meth:`RedisQueueBase._register_scripts`), sends commands through
:class:`~adapters.redis_conn.RedisCalls` (one pipeline per call, errors translated, scripts
reloaded after NOSCRIPT), gathers keys per Cluster slot, and sends the two global hints (the
ready signal and the due index) after the writes they announce. The roles build on it:
:mod:`~adapters.redis_queue.producer`, :mod:`~adapters.redis_queue.owner`,
:mod:`~adapters.redis_queue.delayed`, :mod:`~adapters.redis_queue.dead_letters`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from redis import exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from adapters.redis_conn import Client, RedisCalls, blocking_twin, conf, translated
from adapters.redis_replies import Command, Hints, QueueKeys, score_pairs
from emq.core.errors import BackendUnavailable, ConfigError, Fenced
from emq.core.interfaces import BackendHealth
from emq.core.model import GroupRef, Priority, QueueRef
from emq.core.naming import RedisKeys
from emq.core.signals import DUE_HINT_HORIZON_S, SignalRoutes

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_IDEMPOTENCY_WINDOW_S = 86_400

READY_MAXLEN = 100_000  # signals kept (approximately): a worker further behind relies on its sweep
BATCH_ITEMS = 500  # items per batch script: bounds how long one script holds the server
KEY_CACHE_MAX = 50_000  # queues whose batch-script keys are cached (a worker owns far fewer)


class RedisQueueBase:
    """The plumbing of :class:`~adapters.redis_queue.RedisQueueBackend` (see the module doc).

    Takes ownership of ``client`` and ``blocking_client``: :meth:`aclose` closes them.
    ``blocking_client`` (made by :func:`~adapters.redis_queue.connect`, with no socket timeout)
    serves the blocking reads of ``wait_ready``; without it one is derived from a standalone
    ``client``'s pool, and a Cluster ``client`` is shared (its socket timeout must then exceed
    the wait).
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
        routes: SignalRoutes | None = None,
        addressed: bool = True,
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
        self._routes = routes  # who owns which group: where hints go (adapters.redis_queue.signals)
        self._addressed = addressed  # False: address_to is ignored, every hint is shared
        self._window = str(int(idempotency_window_s))
        self._cluster = isinstance(client, RedisCluster)
        self._key_cache: dict[QueueRef, QueueKeys] = {}
        self._closed = False
        self.health = BackendHealth()
        self._due_hint: Callable[[int], None] | None = None  # (watch_due)
        self._scripts: list[AsyncScript] = []
        self._register_scripts()
        self._calls = RedisCalls(client, self._scripts, self.health)

    # ------------------------------------------------------------------ plumbing

    def _register_scripts(self) -> None:
        """Register the Lua scripts of each role: a role's override calls this, then
        :meth:`_script` for each of its own."""

    def _script(self, source: str) -> AsyncScript:
        script = self._client.register_script(source)
        self._scripts.append(script)
        return script

    @staticmethod
    def _eval(script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    async def load_scripts(self) -> None:
        """Load every script into Redis (on a Cluster client, into every primary)."""
        await self._calls.load_scripts()

    async def _blocking_read(
        self,
        key: str,
        timeout_s: float,
        grace_s: float,
        read: Callable[[int | None], Awaitable[_T]],
    ) -> _T:
        """``read(block_ms)``: a blocking read of ``key`` (the ready signals) that records the
        backend's health; a server that takes it and gives no answer within ``timeout_s +
        grace_s`` is unavailable (:class:`~emq.core.errors.BackendUnavailable`)."""
        block = max(1, round(timeout_s * 1000)) if timeout_s > 0 else None
        try:
            async with asyncio.timeout(max(0.0, timeout_s) + grace_s):
                with translated("wait_ready"):
                    result = await read(block)
        except TimeoutError as e:  # the server took the command but never answered
            self.health.failed(f"no answer to a blocking read of {key}")
            raise BackendUnavailable(f"redis did not answer a blocking read of {key}") from e
        except BackendUnavailable as e:
            self.health.failed(e.message)
            raise
        self.health.ok()
        return result

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

    def _slot(self, key: str) -> int:
        """The key's Cluster slot; 0 on a standalone server, where any keys may go together."""
        return key_slot(key.encode()) if self._cluster else 0

    def _queue_keys(self, queue: QueueRef) -> QueueKeys:
        """The keys a batch script needs for ``queue``, cached: a worker commits the queues it
        owns every second, and spelling three keys costs more than the rest of the call."""
        known = self._key_cache.get(queue)
        if known is None:
            if len(self._key_cache) >= KEY_CACHE_MAX:
                self._key_cache.clear()
            k = self._keys
            stream = k.stream(queue)
            # (one epoch key per group, not per queue: interned, its three queues share it)
            epoch = sys.intern(k.epoch(queue.group))
            known = QueueKeys(stream, k.checkpoint(queue), epoch, self._slot(stream))
            self._key_cache[queue] = known
        return known

    def _per_slot(
        self, items: Iterable[_T], slot: Callable[[_T], int], size: int = BATCH_ITEMS
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

    # ------------------------------------------------------------------ hints for the workers

    def _hint_commands(self, hints: Hints) -> list[Command]:
        """The due-index and ready-signal writes of ``hints``: single-key global commands."""
        commands: list[Command] = []
        if hints.due:
            commands.append(("ZADD", self._keys.due_index(), "LT", *score_pairs(hints.due)))
        soon = due_soon(hints.due.values())
        if hints.ready or soon is not None:
            commands.append(ready_signal(self._keys.ready(), hints.ready, soon))
        return commands

    def watch_due(self, hint: Callable[[int], None]) -> bool:
        """See :meth:`emq.core.interfaces.GroupOwner.watch_due`: this process's own parking is
        told at once (:meth:`_hinted`), another's through the ``d`` field of a ready signal."""
        self._due_hint = hint
        return True

    def _hinted(self, hints: Hints) -> None:
        """``hints`` were written: tell this process's due watcher of the earliest due time."""
        if hints.due and self._due_hint is not None:
            self._due_hint(min(hints.due.values()))

    def _read_due(self, due_ms: int | None) -> None:
        """A ready signal read carried the due time ``due_ms`` (or None)."""
        if due_ms is not None and self._due_hint is not None:
            self._due_hint(due_ms)

    def _reindex_key(self) -> str:
        """The due index :meth:`reindex_delayed` writes (a worker's own one once addressed)."""
        return self._keys.due_index()

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
        else:
            self._hinted(hints)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._blocking is not self._client:
                await self._blocking.aclose()
        finally:
            await self._client.aclose()


def due_soon(due: Iterable[int]) -> int | None:
    """The earliest of the due times ``due`` (epoch ms) if it lies within the due-hint horizon
    (:data:`~emq.core.signals.DUE_HINT_HORIZON_S`), else None: a later one is found by its
    owner's own look at the due index before it falls due."""
    earliest = min(due, default=None)
    if earliest is None:
        return None
    return earliest if earliest < (time.time() + DUE_HINT_HORIZON_S) * 1000 else None


def ready_signal(key: str, names: Iterable[str], due_ms: int | None = None) -> Command:
    """A ready signal on stream ``key``: field ``g``, the group names (one per line), and with
    ``due_ms`` a field ``d``, a job parked until then (a due hint). ``g`` is always there, empty
    for a due hint alone: a reader that does not know ``d`` reads an empty name and skips it."""
    fields: tuple[Any, ...] = ("g", "\n".join(names))
    if due_ms is not None:
        fields += ("d", int(due_ms))
    return ("XADD", key, "MAXLEN", "~", READY_MAXLEN, "*", *fields)
