"""The change log in Redis: one stream, each entry a change as JSON, its stream id the change's id.

A stream's ids are ``<ms>-<seq>`` in the order entries were added, so the log needs no index:
a listing is ``XREVRANGE`` from its cursor, ``since`` and the retention are its lower bound, and
a change is ``XRANGE id id``. An append is one transaction (``XADD`` capped at ``max_entries``,
then ``XTRIM MINID`` at the retention), so the log never holds more than its bounds after any
append; entries past the retention are not answered even before the next append trims them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from emq.core.changes import (
    CHANGE_ID_RE,
    SCAN_ENTRIES,
    Change,
    ChangeFilter,
    ChangeLog,
    ChangePage,
    id_key,
)
from emq.core.errors import NotFound
from emq.core.naming import RedisKeys

BATCH = 200  # entries per XREVRANGE while a listing scans


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _decode(entry: Any) -> Change:
    """One stream entry, ``(id, {"c": json})``, as the change it holds."""
    entry_id, fields = entry
    raw = fields.get(b"c", fields.get("c"))
    return replace(Change.from_dict(json.loads(raw)), id=_text(entry_id))


class RedisChangeLog(OwnedClient, ChangeLog):
    """Owns the client's lifetime only if ``owns_client``; ``clock`` gives epoch seconds."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        retention_s: float,
        max_entries: int,
        owns_client: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._key = keys.changes()
        self._retention_s = retention_s
        self._max_entries = max_entries
        self._clock = clock

    def _horizon_ms(self) -> int:
        return max(0, int((self._clock() - self._retention_s) * 1000))

    async def append(self, change: Change) -> Change:
        body = change.to_dict()
        del body["id"]
        text = json.dumps(body, separators=(",", ":"))
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(self._key, {"c": text}, maxlen=self._max_entries, approximate=False)
        pipe.xtrim(self._key, minid=self._horizon_ms(), approximate=False)
        with translated("recording a change"):
            entry_id, _ = await pipe.execute()
        return replace(change, id=_text(entry_id))

    async def get(self, change_id: str) -> Change:
        if CHANGE_ID_RE.fullmatch(change_id):
            with translated("reading a change"):
                found = await self._client.xrange(self._key, change_id, change_id, count=1)
            if found and int(change_id.partition("-")[0]) >= self._horizon_ms():
                return _decode(found[0])
        raise NotFound(f"change {change_id!r} not found (unknown, or older than kept)")

    async def page(self, query: ChangeFilter) -> ChangePage:
        low = self._horizon_ms()
        if query.since is not None:
            low = max(low, int(query.since * 1000))
        if query.cursor is not None and id_key(query.cursor) == (0, 0):
            return ChangePage([], None)  # nothing is older than the first possible id
        high = "+" if query.cursor is None else "(" + query.cursor
        found: list[Change] = []
        scanned, last = 0, None
        while scanned < SCAN_ENTRIES and len(found) < query.limit:
            count = min(BATCH, SCAN_ENTRIES - scanned)
            with translated("listing changes"):
                batch: list[Any] = list(
                    await self._client.xrevrange(self._key, high, str(low), count=count) or []
                )
            for entry in batch:
                scanned += 1
                change = _decode(entry)
                last = change.id
                if query.matches(change):
                    found.append(change)
                    if len(found) == query.limit:
                        break
            else:
                if len(batch) < count:
                    return ChangePage(found, None)  # the range is exhausted
                high = "(" + str(last)
        return ChangePage(found, last if await self._older(last, low) else None)

    async def _older(self, last: str | None, low: int) -> bool:
        if last is None:
            return False
        with translated("listing changes"):
            return bool(await self._client.xrevrange(self._key, "(" + last, str(low), count=1))
