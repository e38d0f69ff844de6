"""The sender pool: the tasks that take jobs from the :class:`~worker.dispatch.Handoff` and push.

``size`` senders (``EMQ_WORKER_SENDERS``) count against the Handoff's limit, which the
:class:`~worker.dispatch.SendGovernor` moves with the worker's CPU. A push waiting on a slow or
hanging endpoint costs the event loop nothing while it waits (a socket and a few objects), so
it must not hold one of those senders: 50 hanging topics x 32 endpoint concurrency would hold
all 256 and starve every healthy topic on the worker (seen: 10 hanging topics left the healthy
ones 4.8% of their quota). So a sender whose push is slow is *detached*: it stops counting
against the limit, a new sender starts in its place, and the detached one ends with its push.
In-flight requests are then bounded by each topic's endpoint concurrency and by ``most``
(``EMQ_WORKER_MAX_IN_FLIGHT``: sockets and memory), never by the senders.

States of one sender::

    IDLE (in Handoff.get) --takes a job--> PUSHING (counts against the limit)
    PUSHING --push ends--> IDLE
    PUSHING --push of a keyed job ends, its key's next job goes at once--> PUSHING (that job,
                                              without the Handoff: Dispatcher.keyed_done)
    PUSHING --its topic is known slow (when taken) | the push passes stuck_s (scan)--> DETACHED
                                              (a replacement sender starts in its place)
    DETACHED --push ends--> (gone)

A topic is *known slow* while one of its pushes has run past ``stuck_s`` within the last
``slow_hold_s`` (2 s: a hanging endpoint's next request is past ``stuck_s`` again half a second
after the previous one timed out): its new pushes detach as they start, so a wave of fresh
requests to hanging endpoints (whose previous requests timed out together) never fills the
limit for ``stuck_s`` first. :meth:`SenderPool.scan` finds the pushes past ``stuck_s``; the
worker runs it with the governor (every ``period_s``), one look per counted sender. So only
endpoints that *begin* to hang, more of them at once than there are senders, can hold the
senders, and for ``stuck_s`` plus a period at most. (Detaching sooner while jobs wait for a
sender was tried: on a machine whose CPU other processes take, every push looks slow, and the
pool grew past the senders under the W2 load, the very concurrency the governor holds down.)
At ``most`` sender tasks nothing more detaches: a slow push then holds its sender as before,
and counts as stuck for the governor.

Time the event loop itself stood still (a long garbage collection, a machine whose CPU others
take) does not count towards ``stuck_s``: scans further apart than ``period_s`` add the excess
to ``stalled``, and a push's start is recorded net of it. Otherwise one stall of half a second
would make every push in flight look stuck and every topic on the worker slow.

Retries must not crowd the healthy either: every request to a hanging endpoint ends in a
timeout (``EMQ_WORKER_REQUEST_TIMEOUT_S``) and is retried, and 50 hanging topics at concurrency
32 would open 1600 fresh connections in each wave of timeouts (a second of the loop's CPU, and
the healthy topics' pushes wait behind it). So an endpoint's slots shrink as its requests time
out: each timeout halves the slots it may hold (``TopicState.cut``, never under one, so it is
still probed), and each push answered in time gives one back (additive increase,
multiplicative decrease, as TCP does). A slow endpoint that answers within the timeout keeps
all its slots (a 5 s one with concurrency 32: 6.4 jobs/s).

Why not move a stuck push off its sender instead? A running coroutine cannot be moved, so every
push would have to be its own task from the start, a task per job on the hot path. Here a fast
push costs what it did (a clock read and two list stores); only slow pushes pay a task each,
and a slow endpoint takes few jobs a second (a 5 s one with concurrency 32: 6.4/s).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from worker.dispatch import Handoff
from worker.groups import Buffered, GroupState, TopicState

Push = Callable[[GroupState, Buffered], Awaitable[None]]
Raised = Callable[[GroupState, Buffered, Exception], None]
Ended = Callable[[GroupState, Buffered], Buffered | None]

CANCEL_AGAIN_S = 0.5  # a sender still running this long after a cancel is cancelled again


class SenderPool:
    """``size`` senders taking jobs from ``sends`` and calling ``push`` on each, plus one per
    push left to a slow endpoint, ``most`` tasks in all (see the module docstring)."""

    def __init__(
        self,
        sends: Handoff[tuple[GroupState, Buffered]],
        push: Push,
        raised: Raised,
        *,
        size: int,
        most: int,
        stuck_s: float,
        timeout_s: float,
        period_s: float = 0.1,
        slow_hold_s: float = 2.0,
        keyed_done: Ended | None = None,
    ) -> None:
        self._sends = sends
        self._push = push
        self._raised = raised  # ends a job whose push raised: a job never ends a sender
        # A keyed job's push ended (however): its key's next job may go (worker.keys), and
        # comes back when it goes at once, for this sender to push next (Dispatcher.keyed_done).
        self._keyed_done = keyed_done or (lambda group, item: None)
        self.size = size
        self.most = max(most, size)
        self.stuck_s = stuck_s
        self.slow_hold_s = slow_hold_s
        self.period_s = period_s
        self.stalled = 0.0  # seconds the loop stood still between scans, in all
        self._scanned_at = 0.0
        self.timeout_s = timeout_s
        # Per slot (a sender's index, reused once it has ended): when its push started
        # (monotonic less ``stalled`` then, 0 when idle), the push's group, whether the sender
        # is detached.
        self._started: list[float] = []
        self._groups: list[GroupState | None] = []
        self._detached: list[bool] = []
        self._free: list[int] = []
        self._counted: set[int] = set()  # the slots of senders not detached
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed: asyncio.Future[None] | None = None
        self.detached = 0  # detached senders still pushing
        self.most_tasks = 0  # the most sender tasks at once (for operators and benchmarks)

    def __len__(self) -> int:
        return len(self._tasks)

    async def run(self) -> None:
        """Start the senders and wait; raise what a sender died of; stop them all when
        cancelled."""
        self._failed = asyncio.get_running_loop().create_future()
        for _ in range(self.size):
            self._spawn()
        try:
            await self._failed
        finally:
            await self._stop()

    async def _stop(self) -> None:
        pending = set(self._tasks)
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)

    def _spawn(self) -> None:
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._started)
            self._started.append(0.0)
            self._groups.append(None)
            self._detached.append(False)
        self._counted.add(slot)
        task = asyncio.create_task(self._sender(slot), name=f"emq-worker-sender-{slot}")
        self._tasks.add(task)
        self.most_tasks = max(self.most_tasks, len(self._tasks))
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        if self._failed is not None and not self._failed.done():
            self._failed.set_exception(task.exception())  # type: ignore[arg-type]

    def _detach(self, slot: int) -> bool:
        """Let the push in ``slot`` stop counting against the limit; False at ``most``."""
        if len(self._tasks) >= self.most:
            return False
        self._detached[slot] = True
        self._counted.discard(slot)
        self.detached += 1
        self._sends.release()
        self._spawn()
        return True

    def scan(self, mono: float) -> int:
        """Detach every counted push that has run past ``stuck_s`` and mark its topic slow;
        returns how many such pushes still count against the limit (the pool at ``most``).

        Only the ``size`` counted senders are looked at: detached pushes mark their topic
        slow themselves when they end (:meth:`_slow_ended`), so thousands of them waiting on
        hanging endpoints cost a scan nothing."""
        if self._scanned_at:
            self.stalled += max(0.0, mono - self._scanned_at - 1.5 * self.period_s)
        self._scanned_at = mono
        started, groups = self._started, self._groups
        since = mono - self.stalled - self.stuck_s  # started (net of stalls) before this
        stuck = 0
        for slot in list(self._counted):
            t = started[slot]
            if t and t < since:
                group = groups[slot]
                if group is not None:
                    group.topic.slow_at = mono
                if not self._detach(slot):
                    stuck += 1
        return stuck

    def _slow_ended(self, topic: TopicState, started: float) -> None:
        """A detached push ended: one that ran long keeps its topic known slow; after a
        timeout, halve the slots its endpoint may hold (not under one); answered in time,
        give one back."""
        now = time.monotonic()
        if now - started > self.stuck_s:
            topic.slow_at = max(topic.slow_at, now)
        if now - started >= self.timeout_s:
            most = topic.topic.endpoint_concurrency
            topic.cut = most - max(1, (most - topic.cut) // 2)
        elif topic.cut:
            topic.cut -= 1

    async def _sender(self, slot: int) -> None:
        sends, started, groups, detached = self._sends, self._started, self._groups, self._detached
        hold = self.slow_hold_s
        nxt: tuple[GroupState, Buffered] | None = None  # a key's next job, handed to this sender
        try:
            while not detached[slot]:
                if nxt is None:
                    group, item = await sends.get()
                else:
                    (group, item), nxt = nxt, None
                now = time.monotonic()
                started[slot] = now - self.stalled
                groups[slot] = group
                topic = group.topic
                if now - topic.slow_at < hold:
                    self._detach(slot)
                try:
                    await self._push(group, item)
                except Exception as e:  # (a try costs nothing)
                    self._raised(group, item, e)
                finally:
                    started[slot] = 0.0
                    topic.in_flight -= 1
                    group.in_flight -= 1
                    if detached[slot]:
                        self.detached -= 1
                        self._slow_ended(topic, now)
                    else:
                        sends.done()
                        if topic.cut:
                            topic.cut -= 1  # answered in time: give a slot back
                    if item.key is not None:
                        nxt = self._next_of_key(group, item, detached[slot])
        finally:
            if nxt is not None:  # cancelled with a key's next in hand: another sender's
                sends.done()
                sends.put_nowait(nxt)
            detached[slot] = False
            self._counted.discard(slot)
            groups[slot] = None
            self._free.append(slot)
            sends.leave()

    def _next_of_key(
        self, group: GroupState, item: Buffered, detached: bool
    ) -> tuple[GroupState, Buffered] | None:
        """Release the key of ``item``, whose push ended; its next job, if it goes at once, for
        this sender to push next (not a detached one: it ends), or to the Handoff."""
        nxt = self._keyed_done(group, item)
        if nxt is None:
            return None
        if not detached and self._sends.hold():
            return group, nxt
        self._sends.put_nowait((group, nxt))
        return None
