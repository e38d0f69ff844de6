"""Traffic history in Redis: one stream of rows, capped, until ``emq history export`` takes it.

Rows are small (about 200 bytes) and only written for topics with activity, but a busy fleet
writes many: the stream is capped at ``max_rows`` (approximate trimming, so it costs nothing
per write). Export regularly (hourly) to keep everything; the planner reads the Parquet export.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex

from emq.errors import BackendUnavailable
from emq.interfaces import HistoryRow, HistoryStore
from emq.naming import RedisKeys

_FIELDS = [f.name for f in dataclasses.fields(HistoryRow)]
_TYPES = {f.name: f.type for f in dataclasses.fields(HistoryRow)}
_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError)


def _encode(row: HistoryRow) -> dict[str, str]:
    return {name: str(getattr(row, name)) for name in _FIELDS}


def _decode(fields: dict[bytes, bytes]) -> HistoryRow:
    values: dict[str, Any] = {}
    for name in _FIELDS:
        raw = fields.get(name.encode())
        if raw is None:
            continue
        text = raw.decode()
        kind = _TYPES[name]
        values[name] = int(text) if kind == "int" else float(text) if kind == "float" else text
    return HistoryRow(**values)


class RedisHistoryStore(HistoryStore):
    """Owns neither the client's lifetime unless ``owns_client``."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        max_rows: int = 2_000_000,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._key = keys.history_log()
        self._max_rows = max_rows
        self._owns = owns_client

    async def record(self, rows: Sequence[HistoryRow]) -> None:
        if not rows:
            return
        pipe = self._client.pipeline(transaction=False)
        for row in rows:
            pipe.xadd(self._key, _encode(row), maxlen=self._max_rows, approximate=True)  # type: ignore[arg-type]
        try:
            await pipe.execute()
        except _UNAVAILABLE as e:
            raise BackendUnavailable(f"redis unavailable while recording history: {e}") from e

    async def read(
        self, since_s: int | None = None, batch: int = 10_000
    ) -> AsyncIterator[list[HistoryRow]]:
        cursor = "-"
        while True:
            try:
                entries = await self._client.xrange(self._key, min=cursor, max="+", count=batch)
            except _UNAVAILABLE as e:
                raise BackendUnavailable(f"redis unavailable while reading history: {e}") from e
            if not entries:
                return
            rows = [_decode(fields) for _, fields in entries]
            if since_s is not None:
                rows = [r for r in rows if r.interval_start >= since_s]
            if rows:
                yield rows
            last = entries[-1][0].decode()
            cursor = "(" + last
            if len(entries) < batch:
                return

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()


class MemoryHistoryStore(HistoryStore):
    def __init__(self) -> None:
        self.rows: list[HistoryRow] = []

    async def record(self, rows: Sequence[HistoryRow]) -> None:
        self.rows.extend(rows)

    async def read(
        self, since_s: int | None = None, batch: int = 10_000
    ) -> AsyncIterator[list[HistoryRow]]:
        rows = [r for r in self.rows if since_s is None or r.interval_start >= since_s]
        for i in range(0, len(rows), batch):
            yield rows[i : i + batch]

    async def aclose(self) -> None:
        return None
