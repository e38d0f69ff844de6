"""An in-process :class:`~emq.core.changes.ChangeLog` for unit tests and single-process use.

The same contract as the Redis log: ids ``<ms>-<seq>`` in the order entries are appended, the
oldest dropped beyond ``max_entries`` or ``retention_s`` (on append, and never answered once
past ``retention_s``), listings newest first paged by id.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from emq.core.changes import SCAN_ENTRIES, Change, ChangeFilter, ChangeLog, ChangePage, id_key
from emq.core.errors import BackendUnavailable, NotFound


class MemoryChangeLog(ChangeLog):
    """Changes in an ordered dict, oldest first; ``clock`` gives epoch seconds."""

    def __init__(
        self,
        *,
        retention_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._retention_s = retention_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, Change] = OrderedDict()
        self._last = (0, -1)
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True

    def _open(self) -> None:
        if self._closed:
            raise BackendUnavailable("the change log is closed")

    def _next_id(self) -> str:
        ms = int(self._clock() * 1000)
        last_ms, last_seq = self._last
        self._last = (last_ms, last_seq + 1) if ms <= last_ms else (ms, 0)
        return f"{self._last[0]}-{self._last[1]}"

    def _horizon_ms(self) -> int:
        return int((self._clock() - self._retention_s) * 1000)

    def _live(self, change: Change) -> bool:
        return id_key(change.id)[0] >= self._horizon_ms()

    async def append(self, change: Change) -> Change:
        self._open()
        stored = replace(change, id=self._next_id())
        self._entries[stored.id] = stored
        while self._entries and (
            len(self._entries) > self._max_entries or not self._live(self._oldest())
        ):
            self._entries.popitem(last=False)
        return stored

    def _oldest(self) -> Change:
        return next(iter(self._entries.values()))

    async def get(self, change_id: str) -> Change:
        self._open()
        change = self._entries.get(change_id)
        if change is None or not self._live(change):
            raise NotFound(f"change {change_id!r} not found (unknown, or older than kept)")
        return change

    async def page(self, query: ChangeFilter) -> ChangePage:
        self._open()
        below = id_key(query.cursor) if query.cursor else None
        found: list[Change] = []
        scanned = 0
        last: str | None = None
        for change in reversed(self._entries.values()):
            if below is not None and id_key(change.id) >= below:
                continue
            ms = id_key(change.id)[0]
            if ms < self._horizon_ms() or (query.since is not None and ms < query.since * 1000):
                return ChangePage(found, None)  # older ones are older still
            scanned += 1
            last = change.id
            if query.matches(change):
                found.append(change)
                if len(found) == query.limit:
                    break
            if scanned >= SCAN_ENTRIES:
                break
        older = last is not None and id_key(next(iter(self._entries))) < id_key(last)
        return ChangePage(found, last if older else None)
