"""The fetcher pool: fills group buffers from the store without polling idle queues.

A group is *hot* when it may have work in the store: it was just claimed, a ready signal named
it (the API signals every group it appends to), a delayed job of it became due, or the periodic
sweep says so. A hot group with a queue whose buffer is at most half full is queued for a fetch;
one fetch reads many queues in one pipelined round trip. A queue that returns fewer entries than
asked is *exhausted*: it is not read again until the next signal for its group. So a worker
owning 10 000 queues of which 100 are active reads only those 100, plus one sweep of everything
every ``sweep_interval_s`` as a safety net for lost signals.

Priority from Redis to the buffers (ARCHITECTURE.md invariant 5). Chosen: **per-priority fill
targets and per-queue read counts**. Each of a group's three buffers has its own fill target
(``buffer_seconds`` of the group's quota) and each queue asks for its own room, so:

* lows can never fill the room a high needs: a high appended while the low buffer is full
  finds its own buffer empty, its group is fetched at once on the ready signal, and the
  dispatcher (strict or weighted, :mod:`capacity.priority`) takes it before the buffered lows;
* a slow group that shares a read with fast ones gets its own count, not theirs (one count for
  a whole read gave a 20 QPS group ~200 lows, and the group was not read again for seconds).

The alternatives weighed: one target shared by the three buffers, lows held to a share of it
(a full buffer of lows still blocks the read of a high until the lows drain to the mark); or
reading highs on their own round trip (more reads for the same jobs). The cost of the choice:
a group with all three priorities backlogged holds up to three times ``buffer_seconds`` of its
quota, which the byte budget below bounds. After the buffers, the dispatcher hands a group's
jobs to the senders only as its quota's tokens accrue (:mod:`capacity.rate`, a burst of a few
tens of milliseconds), so the handoff never holds many of a group's lows ahead of its high.

Memory is bounded in bytes (``EMQ_WORKER_BUFFER_BYTES``, :class:`~worker.groups.ByteBudget`):
each read's counts are cut to what the budget's room holds at the recent bytes per job, highs
first, then mediums, then lows; over budget, high queues still read up to
:data:`HIGH_FLOOR` jobs each, so priority holds when memory is short. Queues cut are not
exhausted: their groups wait in a FIFO and are queued again once the budget is below
:data:`RESUME_AT` (checked after each read and each job dispatched).

Wake-ups are not lost: a read clears ``queued_fetch`` when it is sent, so a ready signal handled
while it is out queues the group again; its reply marks a queue exhausted only if no signal
arrived since the read was sent (``GroupState.signals``): the signal may name a job appended
after the read looked.

In a fleet the signals and the due index are the worker's own (:mod:`emq.core.signals`): the API
addresses each group's hints to its owner, so a worker reads its share of them, not the fleet's.

One read is out at a time, and a read that also refills the mediums and lows of many groups is
slow on a loaded machine. So a ready signal handled while a read is out also puts its group in
the *high lane*: a read of the signalled groups' high queues alone, sent at once beside the
read that is out (one lane read out at a time; the signals that come meanwhile wait for the
next). A high appended after a read was sent then waits for one small read, not for the big one
and its own after it. Both replies may hold the same high entries; whichever comes second is cut
to the entries past the queue's last fetched offset, so nothing is buffered twice.

Delayed jobs and retries: the promoter asks the store which groups have something due (a sorted
index) and when the next entry falls due, promotes the due jobs of the groups it owns into their
queues, and marks those groups hot. It looks again when that next entry falls due, when a due
hint names a sooner job (:meth:`GroupOwner.watch_due`: the worker's own retries at once, the
API's delayed jobs on a ready signal), and at least every ``DUE_HINT_HORIZON_S``; with a store
that gives no hints, every ``DUE_POLL_S`` (docs/design/signals.md, "Due hints").
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import Entry, GroupOwner, Offset
from emq.core.model import Priority, QueueRef
from emq.core.signals import DUE_HINT_HORIZON_S, DUE_POLL_S
from worker.alarm import Alarm
from worker.groups import Buffered, ByteBudget, GroupState, now_ms
from worker.outage import Outage
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)

LISTENER = "ready-signal listener"  # (its name in the log: paused, resumed)
MAX_QUEUES_PER_READ = 512
FAILED_READ_RETRY_S = 0.25  # a group whose own read failed while others' did not: read again
MAX_ENTRIES_PER_QUEUE = 1000
HIGH_FLOOR = 8  # jobs a high queue may read even with the byte budget spent
DUE_GROUPS_PER_LOOK = 1000  # groups with jobs due the promoter takes per look at the index
MIN_DUE_GAP_S = 0.005  # the promoter looks at most this often, whatever the hints say
RESUME_AT = 0.75  # budget-starved groups are queued again below this share of the budget
# Bytes per job assumed until a read has shown the real size (then: the last read's average).
# Large on purpose: a first read of hundreds of queues must not take gigabytes.
FIRST_JOB_BYTES = 256 * 1024

# One queue of one read: its group, its priority, its queue, its count, the group's signals
Read = tuple[GroupState, int, QueueRef, int, int]


class Fetcher:
    def __init__(
        self,
        queues: GroupOwner,
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
        self.budget = ByteBudget(settings.buffer_bytes)
        self._job_bytes = float(FIRST_JOB_BYTES)  # bytes per job in the last read
        self._starved: dict[GroupState, None] = {}  # cut by the byte budget, in order
        self.reads = 0  # round trips, for metrics and benchmarks
        self.paused = False
        self._out = 0  # reads out (see the high lane in the module doc)
        self._lane: dict[GroupState, None] = {}  # groups whose high queue the lane reads next
        self._lane_task: asyncio.Task[None] | None = None
        self._due_alarm = Alarm()  # the promoter's next look (see promote)
        self._looked = -math.inf  # when it last looked (the event loop's clock)

    # ------------------------------------------------------------------ marking

    def want(self, group: GroupState) -> None:
        """Queue ``group`` for a fetch if it is hot and a queue of it is below half its target.

        Called for every job dispatched: O(1)."""
        self._maybe_resume()
        if group.queued_fetch or group.stopped or not group.hot:
            return
        b = group.buffers
        if b is not None:
            half = group.fill_target(self._settings.buffer_seconds) // 2
            done = group.exhausted
            if (
                (done[0] or len(b[0]) > half)
                and (done[1] or len(b[1]) > half)
                and (done[2] or len(b[2]) > half)
            ):
                return
        group.queued_fetch = True
        self._wanted.append(group)
        self._wakeup.set()

    def signal(self, group: GroupState) -> None:
        group.mark_hot()
        self.want(group)
        if self._out and not self.paused and not group.stopped:
            self._lane[group] = None
            if self._lane_task is None:
                self._lane_task = asyncio.get_running_loop().create_task(self._read_highs())

    def pause(self, paused: bool) -> None:
        """Stop (True) or restart (False) reading from the store; buffered jobs stay.

        Restarting wakes the fetch loop, which sleeps until something is wanted."""
        if paused == self.paused:
            return
        self.paused = paused
        if not paused:
            self._wakeup.set()

    def _maybe_resume(self) -> None:
        """Queue the groups the budget cut once it has room again (below RESUME_AT)."""
        if self._starved and self.budget.used < self.budget.limit * RESUME_AT:
            starved, self._starved = self._starved, {}
            for g in starved:
                self.want(g)

    async def _unread(self, groups: list[GroupState]) -> list[GroupState]:
        """Of ``groups``, those with a queue holding an entry after the last one fetched from
        it (GroupOwner.unread: a sweep of 10 000 idle queues then costs the worker a few ms,
        not a read of every queue); all of them if the store cannot say now (a group that gets
        a job meanwhile is signalled as usual; one whose signal is lost, by the next sweep)."""
        after = {q: p.last_fetched for g in groups for q, p in g.progress.items()}
        try:
            unread = await self._queues.unread(after)
        except BackendUnavailable as e:
            log.warning("sweep: could not ask which queues have jobs (%s): reading all", e)
            return groups
        return [g for g in groups if not g.dropped and any(q in unread for q in g.progress)]

    # ------------------------------------------------------------------ fetching

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if self._lane_task is not None:
                self._lane_task.cancel()

    async def _run(self) -> None:
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
                    self._maybe_resume()  # nothing buffered need be dispatched to resume them
                except BackendUnavailable as e:
                    failed = await self._each(batch) if len(batch) > 1 else batch
                    if len(failed) < len(batch):  # one shard failed: its groups wait, alone
                        self._later(failed)
                        continue
                    for g in batch:  # (a group a signal queued again meanwhile stays once)
                        self.want(g)
                    await self._outage.pause("fetch", e)
                    continue
                self._outage.resumed("fetch")

    async def _each(self, batch: list[GroupState]) -> list[GroupState]:
        """Read ``batch`` one group at a time, at once (a read failed: on a Cluster, a shard
        without a master fails the read of every group it shares a round trip with); the
        groups whose read failed."""
        results = await asyncio.gather(*(self._fetch([g]) for g in batch), return_exceptions=True)
        failed = []
        for g, result in zip(batch, results, strict=True):
            if isinstance(result, BackendUnavailable):
                failed.append(g)
            elif isinstance(result, BaseException):
                raise result
        return failed

    def _later(self, groups: list[GroupState]) -> None:
        """Queue ``groups`` for a fetch again after FAILED_READ_RETRY_S (their shard failed,
        the others' did not: the loop goes on with them)."""
        log.debug("fetch of %d group(s) failed; trying them again shortly", len(groups))

        def again() -> None:
            for g in groups:
                self.want(g)

        asyncio.get_running_loop().call_later(FAILED_READ_RETRY_S, again)

    async def _read(self, reads: list[Read]) -> Mapping[QueueRef, list[Entry]]:
        """One round trip for ``reads``, each from its queue's last fetched offset."""
        requests = {q: g.progress[q].last_fetched for g, _, q, _, _ in reads}
        self.reads += 1
        return await self._queues.read(requests, {q: n for _, _, q, n, _ in reads})

    @staticmethod
    def _buffer(g: GroupState, i: int, q: QueueRef, entries: list[Entry], mono: float) -> int:
        """Append ``entries`` of ``q`` to its buffer (priority ``i``); their payload bytes."""
        progress, buffer = g.progress[q], g.filling()[i]
        size = 0
        for e in entries:
            progress.fetched(e.offset)
            buffer.append(Buffered(q, e.offset, e.payload, mono, progress))
            size += len(e.payload)
        return size

    async def _fetch(self, batch: list[GroupState]) -> None:
        reads = self._within_budget(self._plan(batch))
        if not reads:
            return
        self._out += 1
        try:
            found = await self._read(reads)
        finally:
            self._out -= 1
        mono = time.monotonic()
        touched: dict[GroupState, None] = {}
        jobs = size = 0
        for g, i, q, count, signals in reads:
            entries = found.get(q, [])
            if len(entries) < count and g.signals == signals:
                g.exhausted[i] = True  # (a signal since the read was sent may name a new job)
            if g.stopped or not entries:
                continue
            last = g.progress[q].last_fetched
            if entries[0].offset <= last:
                entries = self._unseen(q, entries, last, quiet=i == 0)
            size += self._buffer(g, i, q, entries, mono)
            jobs += len(entries)
            touched[g] = None
        self._account(jobs, size)
        for g in {g: None for g, *_ in reads}:
            if all(g.exhausted):
                g.hot = False
        for g in touched:
            self._on_jobs(g)

    async def _read_highs(self) -> None:
        """The high lane (see the module doc): read the high queues of the groups signalled
        while a read was out, until none waits. A failed read is left to the main reads (its
        groups are queued for one already)."""
        try:
            while self._lane and not self.paused:
                groups, self._lane = list(self._lane), {}
                reads = self._within_budget(self._plan_highs(groups))
                if not reads:
                    continue
                try:
                    found = await self._read(reads)
                except BackendUnavailable as e:
                    log.debug("high lane read of %d queue(s) failed (%s)", len(reads), e)
                    continue
                self._buffer_highs(reads, found)
        finally:
            self._lane_task = None

    def _plan_highs(self, groups: list[GroupState]) -> list[Read]:
        """The high queue of each of ``groups`` with room (at most half full), with its room."""
        reads: list[Read] = []
        for g in groups:
            if g.stopped:
                continue
            target = g.fill_target(self._settings.buffer_seconds)
            room = target - (len(g.buffers[0]) if g.buffers is not None else 0)
            if room >= target - target // 2:
                q = g.ref.queue(Priority.HIGH)
                reads.append((g, 0, q, min(room, MAX_ENTRIES_PER_QUEUE), g.signals))
        return reads

    def _buffer_highs(self, reads: list[Read], found: Mapping[QueueRef, list[Entry]]) -> None:
        """Buffer what a high lane read found past each queue's last fetched offset (the main
        read out beside it may have buffered some of it first)."""
        mono = time.monotonic()
        jobs = size = 0
        for g, _, q, _, _ in reads:
            last = g.progress[q].last_fetched
            fresh = [e for e in found.get(q, ()) if e.offset > last]
            if g.stopped or not fresh:
                continue
            size += self._buffer(g, 0, q, fresh, mono)
            jobs += len(fresh)
            self._on_jobs(g)
        self._account(jobs, size)

    @staticmethod
    def _unseen(
        queue: QueueRef, entries: list[Entry], last: Offset, quiet: bool = False
    ) -> list[Entry]:
        """Entries of a reply that were fetched already (at or before ``last``, the queue's
        last fetched offset) are never buffered again: they would be delivered twice. A read
        is planned from the last fetched offset, so such a reply is an older read's (seen in a
        Cluster failover, under the Redis client): logged, as a fault to find; ``quiet`` for a
        high queue, which the high lane may have read meanwhile."""
        fresh = [e for e in entries if e.offset > last]
        if quiet:
            return fresh
        log.warning(
            "fetch of %s returned %d entries read before (up to %s); not buffered again",
            queue, len(entries) - len(fresh), last,
        )  # fmt: skip
        return fresh

    def _plan(self, batch: list[GroupState]) -> list[Read]:
        """Each queue of ``batch`` not exhausted and at most half full, with its room.

        A group is read once per batch whatever happened: two reads of one queue from the same
        offset would buffer its entries twice, and deliver them twice."""
        reads: list[Read] = []
        for g in dict.fromkeys(batch):
            g.queued_fetch = False
            if g.stopped:
                continue
            target = g.fill_target(self._settings.buffer_seconds)
            held = [len(b) for b in g.buffers] if g.buffers is not None else [0, 0, 0]
            for i, q in enumerate(g.progress):
                room = target - held[i]
                if not g.exhausted[i] and room >= target - target // 2:
                    reads.append((g, i, q, min(room, MAX_ENTRIES_PER_QUEUE), g.signals))
        return reads

    def _within_budget(self, reads: list[Read]) -> list[Read]:
        """Cut the counts to what the byte budget's room holds at the recent bytes per job:
        highs first, then mediums, then lows, each priority's part split evenly among its
        queues (one each to the first ones when it is short; a queue found empty drops out of
        the next read, and its part with it). A high queue reads up to HIGH_FLOOR jobs outside
        the budget. Groups cut wait in ``_starved``."""
        left = int(self.budget.room() / self._job_bytes)
        if left >= sum(r[3] for r in reads):
            return reads
        kept: list[Read] = []
        for priority in range(3):
            tier = [r for r in reads if r[1] == priority]
            share, extra = divmod(max(0, left), len(tier)) if tier else (0, 0)
            for k, (g, i, q, count, signals) in enumerate(tier):
                n = min(count, share + (k < extra))
                left -= n
                if priority == 0:
                    n = max(n, min(count, HIGH_FLOOR))
                if n > 0:
                    kept.append((g, i, q, n, signals))
                if n < count:
                    self._starved[g] = None
        return kept

    def _account(self, jobs: int, size: int) -> None:
        self.budget.used += size
        if jobs:
            self._job_bytes = max(1.0, size / jobs)

    # ------------------------------------------------------------------ signals

    def address_to(self, worker: str) -> None:
        """Read the hints the fleet addresses to ``worker`` too (:mod:`emq.core.signals`)."""
        groups = self._groups

        def owns(name: str) -> bool:
            group = groups.get(name)
            return group is not None and not group.dropped

        self._queues.address_to(worker, owns)

    async def index_claimed(self, groups: list[GroupState]) -> None:
        """Index the delayed jobs of groups just claimed in this worker's due index: entries
        addressed to a former owner are read by nobody now (a failure waits for the sweep)."""
        refs = [g.ref for g in groups if not g.dropped]
        if refs:
            try:
                await self._queues.reindex_delayed(refs)
            except BackendUnavailable as e:
                log.warning("due index of %d claimed groups not updated (%s)", len(refs), e)
            else:  # their jobs due by now (or soon) were announced to nobody: look now
                self._due_alarm.sooner(asyncio.get_running_loop().time())

    async def listen(self) -> None:
        """Mark the groups named by ready signals hot. After an outage, one sweep: the signals
        written meanwhile may be lost (on a Cluster the inbox may sit on the shard that
        failed, while the groups it names, on healthy shards, got jobs)."""
        cursor: str | None = None
        while True:
            try:
                cursor, names = await self._queues.wait_ready(cursor, timeout_s=1.0)
            except BackendUnavailable as e:
                await self._outage.pause(LISTENER, e)
                continue
            if LISTENER in self._outage.paused():
                self._outage.resumed(LISTENER)
                await self.sweep_once()
            for name in names:
                group = self._groups.get(name)
                if group is not None:
                    self.signal(group)

    async def promote(self, poll_s: float = DUE_POLL_S) -> None:
        """Move due delayed jobs and retries of owned groups into their queues.

        With due hints (:meth:`GroupOwner.watch_due`) it looks when the earliest job it read of
        falls due or a hint names a sooner one, and at least every DUE_HINT_HORIZON_S (a hint
        lost, a job parked beyond the horizon); without them, every ``poll_s``. Never more
        often than every MIN_DUE_GAP_S."""
        alarm = self._due_alarm
        hinted = self._queues.watch_due(self.due_hint)
        loop = asyncio.get_running_loop()
        alarm.set(loop.time() + poll_s)
        while True:
            await alarm.wait()
            self._looked = loop.time()
            alarm.set(self._looked + (DUE_HINT_HORIZON_S if hinted else poll_s))
            try:
                next_ms = await self._promote_due()
            except BackendUnavailable as e:
                await self._outage.pause("due-job promoter", e)
                alarm.sooner(loop.time())  # (the pause returns when it may try again)
                continue
            self._outage.resumed("due-job promoter")
            if hinted and next_ms is not None:
                self.due_hint(next_ms)

    def due_hint(self, due_ms: int) -> None:
        """A job was parked until ``due_ms`` (epoch ms): the promoter looks then if that is
        sooner than planned (and MIN_DUE_GAP_S after its last look at the soonest)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + (due_ms / 1000 - time.time())
        self._due_alarm.sooner(max(at, self._looked + MIN_DUE_GAP_S))

    async def _promote_due(self) -> int | None:
        """Promote what is due now; the earliest due time after now in the index (or None)."""
        now = now_ms()
        names, next_ms = await self._queues.due_scan(now, DUE_GROUPS_PER_LOOK)
        if len(names) >= DUE_GROUPS_PER_LOOK:
            next_ms = now  # more are due than one look takes: look again soon
        owned = [g for n in names if (g := self._groups.get(n)) is not None and not g.dropped]
        if not owned:
            return next_ms
        moved = await asyncio.gather(*(self._queues.promote_due(g.ref, now, 10_000) for g in owned))
        await self._queues.reindex_delayed([g.ref for g in owned])
        for g, n in zip(owned, moved, strict=True):
            if n:
                self.signal(g)
        # The index holds each group's earliest due time only, and these groups' next ones were
        # indexed just now, after the look read them: look again to learn them, MIN_DUE_GAP_S on
        # if jobs moved, else (an entry that promoted nothing) as often as without hints.
        again = now if any(moved) else now + int(DUE_POLL_S * 1000)
        return again if next_ms is None else min(next_ms, again)

    async def sweep(self) -> None:
        """Every ``sweep_interval_s``: treat every owned group with a job after what was
        fetched of it as hot once (a ready signal for it was lost), repair the index."""
        while True:
            await asyncio.sleep(self._settings.sweep_interval_s)
            await self.sweep_once()

    async def sweep_once(self) -> None:
        """One sweep (see :meth:`sweep`)."""
        groups = [g for g in list(self._groups.values()) if not g.dropped]
        for g in await self._unread(groups):
            self.signal(g)
        # The sweep repeats by itself: a failed repair waits for the next one, no pause.
        try:
            await self._queues.reindex_delayed([g.ref for g in groups])
        except BackendUnavailable as e:
            log.warning("delayed-index repair failed (%s); next sweep retries", e)
