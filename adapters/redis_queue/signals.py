"""Hints addressed to owners: ready signals and due-index entries in each worker's inbox.

Layout (:mod:`emq.core.signals` says why): besides the shared ``ready()`` stream and
``due_index()`` sorted set, each fleet worker has an inbox, ``inbox(worker)`` (a stream shaped
like ``ready()``) and ``due_inbox(worker)`` (a sorted set shaped like ``due_index()``), both
under the hash tag ``{worker}``, so a fleet's inboxes spread over a Cluster's slots.

Writing: a hint for a group goes to the inbox of the group's owner as :class:`SignalRoutes`
names it; a group the routes do not know goes to the inbox of this process if it is a worker
that owns it (its retries and promotions), else to the shared keys. A put that touches the
groups of k owners sends k XADDs (one per owner), never one per group. A job parked for within
``DUE_HINT_HORIZON_S`` adds its due time (field ``d``) to its owner's signal, a due hint
(:meth:`RedisQueueBase.watch_due`); the worker's own parking is told in the process instead.

Reading, once :meth:`RedisSignals.address_to` gave the worker's id (without it every call is
the shared-keys one of :mod:`~adapters.redis_queue.owner` and :mod:`~adapters.redis_queue.delayed`):

* ``wait_ready`` reads the inbox and the shared stream; its cursor is ``"<inbox id> <shared
  id>"``. On a standalone server one XREAD BLOCK covers both keys; on a Cluster they sit on two
  slots, so it first reads the shared stream without blocking and then blocks on the inbox only
  (a shared signal then waits at most one ``timeout_s``: the shared stream is the fallback).
  ``count`` bounds the signals read from each stream.
* ``due_scan`` (and ``due_groups``) reads both indexes in one pipeline and merges them, earliest
  first, with the earliest entry after now in either: when the worker looks next.
* ``reindex_delayed`` writes the worker's own index and first removes the groups from the shared
  one (first: a job parked after that removal re-adds its shared entry, one parked before is in
  the delayed set the reindex reads, so no entry is lost in between).

Upkeep: one reader per inbox, so every :data:`UPKEEP_S` the worker trims its inbox to what it
has read (XTRIM MINID) and gives both inbox keys a time to live of :data:`INBOX_TTL_S`, renewed
while it runs: the inboxes of a worker that is gone (a restart takes a new id) expire, and their
hints are not needed (the groups' new owners index them when they claim them).

Misaddressed hints (a writer's routes lag an assignment change; a group was moved away): an
inbox signal or an own-index entry for a group the worker does not own is handed on to the
shared keys, where its owner reads it; shared hints are never handed on, so nothing loops.

Migration: the shared keys are the old layout's keys, read by every addressed worker, and each
reindex moves a group's shared due entry into its owner's index, so signals and due entries
written before the change are found (docs/design/signals.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from adapters.redis_queue.base import RedisQueueBase, due_soon, ready_signal
from adapters.redis_replies import (
    Command,
    Hints,
    cursor_of,
    next_score,
    score_pairs,
    scores_of,
    signal_fields,
    text,
)
from emq.core.errors import BackendUnavailable, InvalidInput
from emq.core.model import GroupRef

log = logging.getLogger(__name__)

_BLOCK_GRACE_S = 5.0  # beyond BLOCK, how long a blocking read may take before it counts as lost
UPKEEP_S = 10.0  # how often a worker trims its inbox and renews its inbox keys' time to live
INBOX_TTL_S = 3600  # an inbox no worker renews (its worker is gone) expires after this


def _never(_name: str) -> bool:
    return False


class RedisSignals(RedisQueueBase):
    """Address hints to owners and read a worker's inbox (see the module doc)."""

    _address: str | None = None
    _owns: Callable[[str], bool] = staticmethod(_never)
    _upkeep_at = 0.0  # monotonic time of the next upkeep

    def address_to(self, worker: str, owns: Callable[[str], bool]) -> None:
        if self._addressed:
            self._address, self._owns = worker, owns

    # ------------------------------------------------------------------ writing

    def _owner_of(self, name: str) -> str | None:
        owner = self._routes.owner(name) if self._routes is not None else None
        if owner is None and self._address is not None and self._owns(name):
            return self._address
        return owner

    def _hint_commands(self, hints: Hints) -> list[Command]:
        """The hint writes of ``hints``, each group's to its owner's inbox (or the shared keys)."""
        routes = self._routes
        if not self._addressed or (not routes and self._address is None):  # nobody to address
            return super()._hint_commands(hints)
        ready: dict[str | None, list[str]] = {}
        for name in hints.ready:
            ready.setdefault(self._owner_of(name), []).append(name)
        due: dict[str | None, dict[str, int]] = {}
        for name, at in hints.due.items():
            due.setdefault(self._owner_of(name), {})[name] = at
        commands: list[Command] = []
        soon: dict[str | None, int] = {}
        for owner, scores in due.items():
            commands.append(("ZADD", self._due_key(owner), "LT", *score_pairs(scores)))
            first = due_soon(scores.values())
            if first is not None and (owner is None or owner != self._address):
                soon[owner] = first  # (this worker's own parking is told at once: _hinted)
        for owner in dict.fromkeys([*ready, *soon]):
            key = self._ready_key(owner)
            commands.append(ready_signal(key, ready.get(owner, ()), soon.get(owner)))
        return commands

    def _ready_key(self, owner: str | None) -> str:
        return self._keys.ready() if owner is None else self._keys.inbox(owner)

    def _due_key(self, owner: str | None) -> str:
        return self._keys.due_index() if owner is None else self._keys.due_inbox(owner)

    async def _hand_on(self, commands: list[Command], what: str) -> None:
        """Send misaddressed hints to the shared keys; a failure only waits for the sweep."""
        if commands:
            try:
                await self._pipeline(commands, what)
            except BackendUnavailable as e:
                log.warning("could not hand on misaddressed hints (%s): %s", what, e)

    # ------------------------------------------------------------------ ready signals

    async def wait_ready(
        self, cursor: str | None, timeout_s: float, count: int = 10_000
    ) -> tuple[str, list[str]]:
        if self._address is None:
            shared_only: tuple[str, list[str]]
            shared_only = await super().wait_ready(cursor, timeout_s, count)  # type: ignore[misc]
            return shared_only
        inbox, shared = self._keys.inbox(self._address), self._keys.ready()

        async def read(block: int | None) -> tuple[dict[str, str], Signals]:
            after = await self._cursors(cursor, inbox, shared)
            return after, await self._read_both(after, max(1, count), block)

        after, (found, due) = await self._blocking_read(inbox, timeout_s, _BLOCK_GRACE_S, read)
        self._read_due(due)
        mine = found.get(inbox, [])
        stray = [n for n in dict.fromkeys(mine) if not self._owns(n)]
        if stray:
            await self._hand_on([ready_signal(shared, stray)], "misaddressed signals")
        if time.monotonic() >= self._upkeep_at:
            await self._upkeep(inbox, after[inbox])
        names = dict.fromkeys(n for n in mine if n not in stray)
        names.update(dict.fromkeys(found.get(shared, [])))
        return f"{after[inbox]} {after[shared]}", list(names)

    async def _upkeep(self, inbox: str, read_up_to: str) -> None:
        """Trim the inbox to what was read; renew both inbox keys' time to live."""
        self._upkeep_at = time.monotonic() + UPKEEP_S
        due = self._keys.due_inbox(self._address or "")
        commands: list[Command] = [
            ("XTRIM", inbox, "MINID", read_up_to),
            ("EXPIRE", inbox, INBOX_TTL_S),
            ("EXPIRE", due, INBOX_TTL_S),
        ]
        try:
            await self._pipeline(commands, "inbox upkeep")
        except BackendUnavailable as e:  # the next call tries again
            log.warning("inbox upkeep of %s failed: %s", self._address, e)

    async def _cursors(self, cursor: str | None, inbox: str, shared: str) -> dict[Any, Any]:
        """The two streams' positions from ``cursor`` (None: their newest signals)."""
        if cursor is None:
            return {inbox: await self._tail(inbox), shared: await self._tail(shared)}
        parts = cursor.split(" ")
        if len(parts) != 2:
            raise InvalidInput("cursor", f"not a ready-signal cursor: {cursor!r}")
        return {inbox: cursor_of(parts[0]), shared: cursor_of(parts[1])}

    async def _tail(self, key: str) -> str:
        newest: Any = await self._blocking.xrevrange(key, "+", "-", 1)
        return text(newest[0][0]) if newest else "0-0"

    async def _read_both(self, after: dict[Any, Any], count: int, block: int | None) -> Signals:
        """XREAD the inbox and the shared stream; ``after`` moves to the last ids read."""
        if not self._cluster:
            return _names(await self._blocking.xread(after, count, block), after)
        inbox, shared = after  # dicts keep order: the inbox first
        found = _names(await self._blocking.xread({shared: after[shared]}, count), after)
        if any(found[0].values()) or found[1] is not None:
            return found  # something shared: answer now, the next call reads the inbox
        return _names(await self._blocking.xread({inbox: after[inbox]}, count, block), after)

    # ------------------------------------------------------------------ the due index

    async def due_groups(self, now_ms: int, limit: int) -> list[str]:
        return (await self.due_scan(now_ms, limit))[0]

    async def due_scan(self, now_ms: int, limit: int) -> tuple[list[str], int | None]:
        if self._address is None or limit <= 0:
            found: tuple[list[str], int | None]
            found = await super().due_scan(now_ms, limit)  # type: ignore[misc]
            return found
        own, shared = self._keys.due_inbox(self._address), self._keys.due_index()
        read = ("-inf", int(now_ms), "WITHSCORES", "LIMIT", 0, limit)
        later = (f"({int(now_ms)}", "+inf", "WITHSCORES", "LIMIT", 0, 1)
        replies = await self._pipeline(
            [
                ("ZRANGEBYSCORE", own, *read),
                ("ZRANGEBYSCORE", shared, *read),
                ("ZRANGEBYSCORE", own, *later),
                ("ZRANGEBYSCORE", shared, *later),
            ],
            "due_groups",
        )
        later_ms = (next_score(replies[2]), next_score(replies[3]))
        next_ms = min((at for at in later_ms if at is not None), default=None)
        mine = scores_of(replies[0])
        stray = {n: at for n, at in mine.items() if not self._owns(n)}
        if stray:  # moved away: the shared index is where the new owner looks
            moves: list[Command] = [("ZADD", shared, "LT", *score_pairs(stray))]
            await self._hand_on([*moves, ("ZREM", own, *stray)], "misaddressed due entries")
        merged = {n: at for n, at in mine.items() if n not in stray}
        for name, at in scores_of(replies[1]).items():
            merged[name] = min(at, merged.get(name, at))
        return sorted(merged, key=lambda n: (merged[n], n))[:limit], next_ms

    async def reindex_delayed(self, groups: Sequence[GroupRef]) -> None:
        if self._address is None or not groups:
            await super().reindex_delayed(groups)  # type: ignore[misc]
            return
        names = list(dict.fromkeys(str(g) for g in groups))
        # Before the reindex reads the delayed sets: see the module doc.
        await self._pipeline([("ZREM", self._keys.due_index(), *names)], "reindex_delayed")
        await super().reindex_delayed(groups)  # type: ignore[misc]

    def _reindex_key(self) -> str:
        return self._due_key(self._address)


Signals = tuple[dict[str, list[str]], int | None]  # group names per stream, the earliest due hint


def _names(reply: Any, after: dict[Any, Any]) -> Signals:
    """Group names per stream from an XREAD reply (RESP2 list or RESP3 dict), and the earliest
    due hint read (or None); moves ``after``."""
    pairs = reply.items() if isinstance(reply, dict) else (reply or ())
    found: dict[str, list[str]] = {}
    due: int | None = None
    for key, entries in pairs:
        name, names = text(key), dict[str, None]()
        for id_, fields in entries:
            after[name] = text(id_)
            due = signal_fields(fields, names, due)
        found[name] = list(names)
    return found, due
