"""Traffic history in Redis: one stream of rows, capped, until ``emq history export`` takes it.

Rows are small (about 200 bytes) and only written for topics with activity, but a busy fleet
writes many: the stream is capped at ``max_rows`` (approximate trimming, so it costs nothing
per write). Export regularly (hourly) to keep everything; the planner reads the Parquet export.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_conn import OwnedClient, translated
from adapters.redis_latency import MemoryLatencyBoard, RedisLatencyBoard
from emq.core.interfaces import HistoryRow, HistoryStore
from emq.core.latency import LatencyBoard
from emq.core.naming import RedisKeys

_FIELDS = [f.name for f in dataclasses.fields(HistoryRow)]
_TYPES = {f.name: f.type for f in dataclasses.fields(HistoryRow)}


def _encode(row: HistoryRow) -> dict[str, str]:
    return {name: str(getattr(row, name)) for name in _FIELDS}


def _decode(fields: Mapping[Any, Any]) -> HistoryRow:
    values: dict[str, Any] = {}
    for name in _FIELDS:
        raw = fields.get(name.encode())
        if raw is None:
            continue
        text = raw.decode()
        kind = _TYPES[name]
        values[name] = int(text) if kind == "int" else float(text) if kind == "float" else text
    return HistoryRow(**values)


class RedisHistoryStore(OwnedClient, HistoryStore, LatencyBoard):
    """Owns neither the client's lifetime unless ``owns_client``.

    Also the latency board (:mod:`adapters.redis_latency`): workers write it where they write
    their rates, and the API reads it where it reads them."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        keys: RedisKeys,
        *,
        max_rows: int = 2_000_000,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, owns_client=owns_client)
        self._key = keys.history_log()
        self._rates = keys.rates()
        self._max_rows = max_rows
        self._latency = RedisLatencyBoard(client, keys)
        self.window_s = self._latency.window_s

    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        await self._latency.add_latency(counts)

    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        return await self._latency.latency_window(topics)

    async def record(self, rows: Sequence[HistoryRow]) -> None:
        if not rows:
            return
        pipe = self._client.pipeline(transaction=False)
        for row in rows:
            pipe.xadd(self._key, _encode(row), maxlen=self._max_rows, approximate=True)  # type: ignore[arg-type]
        with translated("recording history"):
            await pipe.execute()

    async def read(
        self, since_s: int | None = None, batch: int = 10_000
    ) -> AsyncIterator[list[HistoryRow]]:
        cursor = "-"
        while True:
            with translated("reading history"):
                entries = await self._client.xrange(self._key, min=cursor, max="+", count=batch)
            if not entries:
                return
            rows = [_decode(fields or {}) for _, fields in entries]
            if since_s is not None:
                rows = [r for r in rows if r.interval_start >= since_s]
            if rows:
                yield rows
            last = entries[-1][0]
            last = last.decode() if isinstance(last, bytes) else str(last)
            cursor = "(" + last
            if len(entries) < batch:
                return

    async def recent(self, since_s: int) -> list[HistoryRow]:
        """Seeks by entry id (the time a row was written, never before its interval's start)."""
        with translated("reading history"):
            entries = await self._client.xrange(self._key, min=f"{since_s * 1000}", max="+")
        rows = [_decode(fields or {}) for _, fields in entries or []]
        return [r for r in rows if r.interval_start >= since_s]

    async def publish_rates(self, source: str, rates: Mapping[str, float]) -> None:
        if not rates:
            return
        now = f"{time.time():.3f}"
        mapping = {f"{topic}|{source}": f"{rate:.3f} {now}" for topic, rate in rates.items()}
        with translated("publishing rates"):
            await self._client.hset(self._rates, mapping=mapping)  # type: ignore[arg-type]

    async def rate(self, topic: str, max_age_s: float = 5.0) -> float:
        """Sums fresh entries; entries older than a minute (gone workers) are deleted."""
        total, stale = 0.0, []
        now = time.time()
        with translated("reading rates"):
            async for field, value in self._client.hscan_iter(self._rates, match=f"{topic}|*"):
                rate_text, _, stamp = value.decode().partition(" ")
                age = now - float(stamp or 0)
                if age <= max_age_s:
                    total += float(rate_text)
                elif age > 60:
                    stale.append(field)
            if stale:
                await self._client.hdel(self._rates, *stale)
        return round(total, 3)

    async def source_rates(self, max_age_s: float = 5.0) -> dict[str, dict[str, float]]:
        """Every fresh ``topic|source`` entry, by source (one HSCAN of the rates hash)."""
        out: dict[str, dict[str, float]] = {}
        now = time.time()
        with translated("reading rates"):
            async for field, value in self._client.hscan_iter(self._rates):
                topic, _, source = field.decode().rpartition("|")
                rate_text, _, stamp = value.decode().partition(" ")
                if now - float(stamp or 0) <= max_age_s:
                    out.setdefault(source, {})[topic] = float(rate_text)
        return out


class MemoryHistoryStore(HistoryStore, LatencyBoard):
    def __init__(self) -> None:
        self.rows: list[HistoryRow] = []
        self._rates: dict[tuple[str, str], tuple[float, float]] = {}
        self._latency = MemoryLatencyBoard()
        self.window_s = self._latency.window_s

    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        await self._latency.add_latency(counts)

    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        return await self._latency.latency_window(topics)

    async def publish_rates(self, source: str, rates: Mapping[str, float]) -> None:
        now = time.time()
        for topic, rate in rates.items():
            self._rates[(topic, source)] = (rate, now)

    async def rate(self, topic: str, max_age_s: float = 5.0) -> float:
        now = time.time()
        fresh = [
            r for (t, _), (r, at) in self._rates.items() if t == topic and now - at <= max_age_s
        ]
        return round(sum(fresh), 3)

    async def source_rates(self, max_age_s: float = 5.0) -> dict[str, dict[str, float]]:
        now = time.time()
        out: dict[str, dict[str, float]] = {}
        for (topic, source), (rate, at) in self._rates.items():
            if now - at <= max_age_s:
                out.setdefault(source, {})[topic] = rate
        return out

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
