"""The dispatcher: takes jobs from group buffers at each group's quota, high before low.

Groups with buffered jobs wait in a heap keyed by when they may next send. Each tick pops the
groups that are due, while the sender pool has room: for each it reserves from the group's
:class:`~capacity.rate.QpsCounter` (capped by the jobs it has and by its topic's endpoint
concurrency), plans the take across high/medium/low (strict or weighted), hands the jobs to the
senders and rolls back whatever it reserved and could not use. A group that still has jobs goes
back into the heap for when its next token accrues; one whose endpoint is full is looked at again
next tick. Idle groups are not in the heap at all, so a tick costs nothing for them.

Fairness under overload: when the senders are full, the due groups stay in the heap in the order
they became due, and the next tick starts with the longest-waiting one.

Between dispatches the loop awaits :meth:`Dispatcher.pause`: one tick while any group waits in
the heap; with none, until a group is woken (new jobs: they are dispatched at once, without
waiting for a tick) or :data:`IDLE_WAIT_S` passes, so an idle worker does not wake 200 times a
second.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from capacity.priority import plan_strict
from worker.groups import Buffered, GroupState

Send = Callable[[GroupState, Buffered], None]

T = TypeVar("T")

IDLE_WAIT_S = 0.1  # with nothing to dispatch, the loop still runs this often


class Dispatcher:
    def __init__(self, send: Send, tick_s: float) -> None:
        self._send = send
        self._tick_s = tick_s
        self._heap: list[tuple[float, int, GroupState]] = []
        self._seq = itertools.count()
        self._woken = asyncio.Event()

    def __len__(self) -> int:
        return len(self._heap)

    def wake(self, group: GroupState, at: float) -> None:
        """Consider ``group`` from monotonic time ``at`` (no-op if it is already waiting)."""
        if not group.scheduled and not group.stopped:
            group.scheduled = True
            heapq.heappush(self._heap, (at, next(self._seq), group))
            self._woken.set()

    async def pause(self) -> None:
        """Wait until the next :meth:`dispatch` may find work (see the module docstring)."""
        if self._heap:
            await asyncio.sleep(self._tick_s)
            return
        self._woken.clear()
        try:
            async with asyncio.timeout(IDLE_WAIT_S):
                await self._woken.wait()
        except TimeoutError:
            pass

    def dispatch(self, budget: int, wall: float, mono: float) -> int:
        """Send up to ``budget`` jobs from the groups due at ``mono``; returns how many."""
        heap = self._heap
        sent = 0
        while heap and heap[0][0] <= mono and sent < budget:
            _, _, group = heapq.heappop(heap)
            group.scheduled = False
            if group.stopped or group.topic.topic.paused:
                continue
            sent += self._serve(group, budget - sent, wall, mono)
        return sent

    def _serve(self, group: GroupState, budget: int, wall: float, mono: float) -> int:
        available = group.buffered()
        if available == 0:
            return 0
        room = group.topic.room()
        want = min(available, room, budget)
        granted = group.counter.reserve(want, wall) if want > 0 else 0
        taken = self._take(group, granted, mono) if granted else 0
        if granted > taken:
            group.counter.rollback(granted - taken, wall)
        if group.buffered():
            self.wake(group, mono + self._delay(group, want, granted, wall))
        return taken

    def _delay(self, group: GroupState, want: int, granted: int, wall: float) -> float:
        if want == 0 or granted == want:
            return self._tick_s  # endpoint full, senders full, or all sent: look again next tick
        # Quota-limited: come back when the next token has accrued.
        return max(self._tick_s, 1.0 / max(1, group.counter.qps))

    def _take(self, group: GroupState, budget: int, mono: float) -> int:
        buffers = group.buffers
        assert buffers is not None  # _serve takes only from a group with jobs
        available = [len(b) for b in buffers]
        if group.planner is None:
            plan = plan_strict(budget, available)
        else:
            plan = group.planner.plan(budget, available, group.oldest_wait_s(mono))
        taken = 0
        for buffer, n in zip(buffers, plan, strict=True):
            for _ in range(n):
                self._send(group, buffer.popleft())
            taken += n
        return taken


class Handoff(Generic[T]):
    """The FIFO from the dispatcher to the sender pool.

    ``asyncio.Queue`` minus what the pool never uses (a bound, waiting putters, ``task_done``):
    a deque and the idle senders' futures. It is on every job's path, and this costs a third of
    what the queue did (about 0.7 µs a job less).
    """

    __slots__ = ("_idle", "_items")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        self._wake_one()

    def _wake_one(self) -> None:
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> T:
        items = self._items
        while not items:  # woken, but another sender took the item first: wait again
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if items:  # woken and cancelled at once: pass the wake-up on
                    self._wake_one()
                raise
        return items.popleft()
