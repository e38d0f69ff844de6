"""The fetcher pool: fills group buffers from the store without polling idle queues.

A group is *hot* when it may have work in the store: it was just claimed, a ready signal named
it (the API signals every group it appends to), a delayed job of it became due, or the periodic
sweep says so. A hot group whose buffers are below their fill target is queued for a fetch; one
fetch reads many queues in one pipelined round trip. A queue that returns fewer entries than
asked is *exhausted*: it is not read again until the next signal for its group. So a worker
owning 10 000 queues of which 100 are active reads only those 100, plus one sweep of everything
every ``sweep_interval_s`` as a safety net for lost signals.

Delayed jobs and retries: a poller asks the store which groups have something due (a sorted
index, one query per ``due_poll_s``), promotes the due jobs of the groups it owns into their
queues, and marks those groups hot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from emq.errors import BackendUnavailable
from emq.interfaces import Offset, QueueBackend
from emq.model import QueueRef
from worker.groups import Buffered, GroupState, now_ms
from worker.outage import Outage
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)

MAX_QUEUES_PER_READ = 512
MAX_ENTRIES_PER_QUEUE = 1000


class Fetcher:
    def __init__(
        self,
        queues: QueueBackend,
        settings: WorkerSettings,
        groups: Mapping[str, GroupState],
        on_jobs: Callable[[GroupState], None],
        outage: Outage | None = None,
    ) -> None:
        self._queues = queues
        self._outage = outage or Outage()
        self._settings = settings
        self._groups = groups  # by str(GroupRef), owned by the worker
        self._on_jobs = on_jobs
        self._wanted: list[GroupState] = []
        self._wakeup = asyncio.Event()
        self.reads = 0  # round trips, for metrics and benchmarks
        self.paused = False

    # ------------------------------------------------------------------ marking

    def want(self, group: GroupState) -> None:
        """Queue ``group`` for a fetch if it is hot and below its fill target."""
        if group.queued_fetch or group.stopped or not group.hot:
            return
        if group.buffered() >= group.fill_target(self._settings.buffer_seconds) // 2:
            return
        group.queued_fetch = True
        self._wanted.append(group)
        self._wakeup.set()

    def signal(self, group: GroupState) -> None:
        group.mark_hot()
        self.want(group)

    # ------------------------------------------------------------------ fetching

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._wanted and not self.paused:
                batch, self._wanted = (
                    self._wanted[: MAX_QUEUES_PER_READ // 3],
                    self._wanted[MAX_QUEUES_PER_READ // 3 :],
                )
                try:
                    await self._fetch(batch)
                except BackendUnavailable as e:
                    for g in batch:
                        g.queued_fetch = False
                        self.want(g)
                    await self._outage.pause("fetch", e)
                    continue
                self._outage.resumed("fetch")

    async def _fetch(self, batch: list[GroupState]) -> None:
        requests: dict[QueueRef, Offset] = {}
        owners: dict[QueueRef, tuple[GroupState, int]] = {}
        count = 1
        for g in batch:
            g.queued_fetch = False
            if g.stopped:
                continue
            room = g.fill_target(self._settings.buffer_seconds) - g.buffered()
            count = max(count, min(room, MAX_ENTRIES_PER_QUEUE))
            for i, (q, p) in enumerate(g.progress.items()):
                if not g.exhausted[i]:
                    requests[q] = p.last_fetched
                    owners[q] = (g, i)
        if not requests:
            return
        self.reads += 1
        found = await self._queues.read(requests, count)
        mono = time.monotonic()
        touched: set[GroupState] = set()
        for q, (g, i) in owners.items():
            entries = found.get(q, [])
            if len(entries) < count:
                g.exhausted[i] = True
            if g.stopped or not entries:
                continue
            progress, buffer = g.progress[q], g.filling()[i]
            for e in entries:
                progress.fetched(e.offset)
                buffer.append(Buffered(q, e.offset, e.payload, mono, progress))
            touched.add(g)
        for g in {g for g, _ in owners.values()}:
            if all(g.exhausted):
                g.hot = False
        for g in touched:
            self._on_jobs(g)

    # ------------------------------------------------------------------ signals

    async def listen(self) -> None:
        """Mark the groups named by ready signals hot."""
        cursor: str | None = None
        while True:
            try:
                cursor, names = await self._queues.wait_ready(cursor, timeout_s=1.0)
            except BackendUnavailable as e:
                await self._outage.pause("ready-signal listener", e)
                continue
            self._outage.resumed("ready-signal listener")
            for name in names:
                group = self._groups.get(name)
                if group is not None:
                    self.signal(group)

    async def promote(self, poll_s: float = 0.1) -> None:
        """Move due delayed jobs and retries of owned groups into their queues."""
        while True:
            await asyncio.sleep(poll_s)
            try:
                await self._promote_due()
            except BackendUnavailable as e:
                await self._outage.pause("due-job promoter", e)
                continue
            self._outage.resumed("due-job promoter")

    async def _promote_due(self) -> None:
        now = now_ms()
        names = await self._queues.due_groups(now, 1000)
        owned = [g for n in names if (g := self._groups.get(n)) is not None and not g.dropped]
        if not owned:
            return
        moved = await asyncio.gather(*(self._queues.promote_due(g.ref, now, 10_000) for g in owned))
        await self._queues.reindex_delayed([g.ref for g in owned])
        for g, n in zip(owned, moved, strict=True):
            if n:
                self.signal(g)

    async def sweep(self) -> None:
        """Every ``sweep_interval_s``: treat every owned group as hot once, repair the index."""
        while True:
            await asyncio.sleep(self._settings.sweep_interval_s)
            groups = [g for g in list(self._groups.values()) if not g.dropped]
            for g in groups:
                self.signal(g)
            # The sweep repeats by itself: a failed repair waits for the next one, no pause.
            try:
                await self._queues.reindex_delayed([g.ref for g in groups])
            except BackendUnavailable as e:
                log.warning("delayed-index repair failed (%s); next sweep retries", e)
