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

Between dispatches the loop awaits :meth:`Dispatcher.pause`: until the first waiting group is
due, :data:`IDLE_WAIT_S` at most (a tick at most while jobs wait for a sender), or with none
:data:`IDLE_WAIT_S`, so neither an idle nor a pacing worker wakes 200 times a second. A group
woken for sooner (new jobs; a keyed job done, so its key's next job may go) ends the pause when
it is due a tick or more before the pause would end, or at once when asked (``prompt``). A
group already waiting in the heap for later is moved earlier by such a wake (its entry for
later is left in the heap and skipped: ``GroupState.due`` says which is live).

Pacing is what a rate-limited scheduler mostly does: groups at their quota with a backlog, each
due again when its counter grants the next job. Each such return would be a loop turn of its
own (a timer, the dispatch, the senders' turn), for one job. So a quota-limited group comes back
at the next point of a grid all of them share (``grid_s``, ``EMQ_WORKER_PACE_GRID_S``), and one
turn serves every group due in that stretch; their jobs go to the senders together. A group is
late by less than its bucket holds (30 ms of its quota), so it loses no grant; one with a high
job waiting, or held back by its sliding log rather than its bucket, comes back exactly when
due.

A keyed job's next does not even wait for that: when the push of a key's job ends and its
key's next job may go at once (:meth:`Dispatcher.keyed_done`: a grant of its group's quota now,
nothing of a higher priority waiting in its group), it goes straight to the sender whose push
just ended, with no loop turn for the dispatcher and none for a sender to wake (half a key's
cycle under load: ``emq bench dispatch --workload W12``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from capacity.priority import plan_strict
from worker import regroup
from worker.alarm import set_done
from worker.endpoints import EndpointRates
from worker.groups import Buffered, GroupState, priority_index
from worker.keys import KeyLines
from worker.lending import lend_wait_s, lenders

Send = Callable[[GroupState, Buffered], None]

T = TypeVar("T")

IDLE_WAIT_S = 0.1  # with nothing to dispatch, the loop still runs this often
# A group whose endpoint is full of pushes that run long (its topic seen slow this recently,
# see worker.senders) is looked at this often instead of every tick: its pushes take half a
# second or more, and 100 such groups looked at every tick cost 5% of a core for nothing.
SLOW_FULL_WAIT_S = 0.05
SLOW_SEEN_S = 1.0
# A quota-limited group is looked at again when its counter can grant (QpsCounter.wait_s), but
# not sooner than this: the loop's own turn costs about as much.
MIN_WAIT_S = 0.0005
# The loop sleeps at least this long between dispatches (many groups due at scattered times
# would otherwise wake it thousands of times a second).
MIN_PAUSE_S = 0.001
# Keyed jobs parked behind their key's job in flight, per group and priority, before the
# dispatcher leaves
# the next one in its buffer instead (and so stops the fetcher too): the larger of this and 2 s
# of the group's quota.
PARKED_MIN = 256
# Held jobs (see Dispatcher._admit) a dispatch looks past in one buffer for jobs of other keys
# (or none) that may go: an unkeyed high behind a held one must not wait while lows go.
HELD_SCAN = 32


class Dispatcher:
    def __init__(self, send: Send, tick_s: float, grid_s: float = 0.0) -> None:
        self._send = send
        self._tick_s = tick_s
        self._grid_s = grid_s  # quota-limited groups come back on this grid (see _delay)
        self._heap: list[tuple[float, int, GroupState]] = []
        self._seq = itertools.count()
        # Topics with jobs parked for their endpoint's pace (worker.endpoints): released per tick.
        self.parking: set[EndpointRates] = set()
        # Where a job goes that its endpoint cannot take for a while (Outcomes.defer: the
        # delayed set, no attempt burnt); None: it waits at the head of its buffer instead.
        self.defer: Callable[[GroupState, Buffered, int], None] | None = None
        # A key's next job handed straight to the sender that just ended its key's push
        # (keyed_done) gets Worker._send's bookkeeping through this, without the Handoff;
        # None: it goes back to its buffer for the next dispatch instead.
        self.claim: Send | None = None
        # The pause in progress (see pause): its future and when it ends (monotonic).
        self._sleeper: asyncio.Future[None] | None = None
        self._sleep_until = 0.0
        # How late the loop came back from the last pause that ran its course: the event
        # loop's lag, sampled at least every IDLE_WAIT_S without a timer of its own.
        self.lag_s = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def wake(self, group: GroupState, at: float, *, prompt: bool = False) -> None:
        """Consider ``group`` from monotonic time ``at``: no-op if it already waits in the heap
        for ``at`` or sooner. Ends the loop's pause if that lasts past ``at`` by a tick or more
        (by any time with ``prompt``, or an idle loop)."""
        if group.stopped or (group.scheduled and group.due <= at):
            return
        group.scheduled = True
        group.due = at  # (an entry for later stays in the heap: dispatch skips it)
        heap = self._heap
        heapq.heappush(heap, (at, next(self._seq), group))
        sleeper = self._sleeper
        if (
            sleeper is not None
            and at < self._sleep_until
            and (prompt or len(heap) == 1 or at < self._sleep_until - self._tick_s)
            and not sleeper.done()
        ):
            sleeper.set_result(None)

    async def pause(self, busy: bool = True) -> None:
        """Wait until the next :meth:`dispatch` may find work (see the module docstring);
        ``busy``: jobs handed out wait for a sender."""
        heap = self._heap
        now = time.monotonic()
        if heap:
            # Until the first waiting group is due: on time for its quota's pace. At most a
            # tick while jobs wait for a sender (the next turn wakes one for each: catch_up);
            # a whole tick when one is due already (the senders were full: no spinning while
            # the pool drains).
            due_in = heap[0][0] - now
            if due_in <= 0:
                pause = self._tick_s
            else:
                pause = min(self._tick_s if busy else IDLE_WAIT_S, max(MIN_PAUSE_S, due_in))
        elif self.parking:  # parked jobs go at their endpoint's pace
            due_in = min(r.next_due() for r in self.parking) - now
            # (a disabled endpoint's is far off: then not before new jobs, at most idle)
            pause = self._tick_s if due_in <= self._tick_s else min(due_in, IDLE_WAIT_S)
        else:
            pause = IDLE_WAIT_S
        # (asyncio.sleep, but a wake() for sooner may end it: the same future and timer)
        loop = asyncio.get_running_loop()
        sleeper = self._sleeper = loop.create_future()
        self._sleep_until = now + pause
        timer = loop.call_later(pause, set_done, sleeper)
        try:
            await sleeper
        finally:
            timer.cancel()
            self._sleeper = None
        late = time.monotonic() - self._sleep_until
        if late >= 0:  # (ran its course: a wake() for sooner ends it before)
            self.lag_s = late

    def dispatch(self, budget: int, wall: float, mono: float) -> int:
        """Send up to ``budget`` jobs from the groups due at ``mono``; returns how many."""
        heap = self._heap
        sent = self._release_parked(budget, wall, mono) if self.parking else 0
        while heap and heap[0][0] <= mono and sent < budget:
            at, _, group = heapq.heappop(heap)
            if not group.scheduled or at != group.due:
                continue  # a group woken for sooner meanwhile: this entry is stale
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
        taken = self._take(group, granted, wall, mono) if granted else 0
        if granted > taken:
            group.counter.rollback(granted - taken, wall)
        elif taken < want and len(group.topic.groups) > 1:
            taken += self._borrow(group, want - taken, wall, mono)
            granted = taken
        if group.buffered():
            self.wake(group, mono + self._delay(group, want, granted, wall, mono))
        return taken

    def _borrow(self, group: GroupState, want: int, wall: float, mono: float) -> int:
        """Send up to ``want`` more of ``group``'s jobs on grants of idle siblings' budgets
        (worker.lending); how many went."""
        taken = 0
        for sibling in lenders(group):
            counter = sibling.counter
            granted = counter.reserve(want - taken, wall)
            if not granted:
                continue
            sent = self._take(group, granted, wall, mono, sibling)
            taken += sent
            if sent < granted:  # nothing more it may send now
                counter.rollback(granted - sent, wall)
                break
            if taken >= want:
                break
        return taken

    def _delay(self, group: GroupState, want: int, granted: int, wall: float, mono: float) -> float:
        if want == 0 and mono - group.topic.slow_at < SLOW_SEEN_S:
            return SLOW_FULL_WAIT_S  # endpoint full, and its pushes run long
        if want == 0 or granted == want:
            return self._tick_s  # endpoint full, senders full, or all sent: look again next tick
        # Quota-limited: come back exactly when the counter can grant again (the next token,
        # or the oldest grant of the sliding log leaving the window); see QpsCounter.wait_s.
        wait = group.counter.wait_s(wall)
        if len(group.topic.groups) > 1:
            wait = lend_wait_s(group, wall, wait)
        wait = max(MIN_WAIT_S, wait)
        grid = self._grid_s
        buffers = group.buffers
        if grid > 0 and buffers is not None and not buffers[0] and not group.counter.log_full(wall):
            # At the next point of the grid all quota-limited groups share, so one loop turn
            # serves every group due in that stretch. Late by less than its bucket holds
            # (QpsCounter.burst_s), a group loses no grant. Exactly when due instead: with a
            # high job waiting, or when the sliding log holds the group back (self-clocked:
            # a grant late by the grid would delay the one a window later, for good).
            wait = math.ceil((mono + wait) / grid) * grid - mono
        return wait

    def _take(
        self,
        group: GroupState,
        budget: int,
        wall: float,
        mono: float,
        lent_by: GroupState | None = None,
    ) -> int:
        buffers = group.buffers
        assert buffers is not None  # _serve takes only from a group with jobs
        stamp = (lent_by or group).counter.newest  # (the stamp of the grants just made)
        available = [len(b) for b in buffers]
        if group.planner is None:
            plan = plan_strict(budget, available)
        else:
            plan = group.planner.plan(budget, available, group.oldest_wait_s(mono))
        taken = carry = 0
        rates = group.topic.rates
        if rates is not None and not rates.watching:
            rates = None  # every endpoint of its topic is OPEN: nothing to ask per job
        for rank, (buffer, n) in enumerate(zip(buffers, plan, strict=True)):
            n += carry
            held: list[Buffered] = []
            while n and buffer:
                item = buffer.popleft()
                key = item.read_key()
                if rates is not None and not (verdict := rates.admit(group, item, mono)):
                    if verdict is None:  # too many parked on its endpoint
                        if self.defer is None:
                            buffer.appendleft(item)  # the rest of this buffer waits
                            break
                        group.budget.used -= len(item.payload)  # (out of the buffers)
                        self.defer(group, item, int((wall + rates.overflow_s) * 1000))
                    continue  # parked until its endpoint's pace lets it go (worker.endpoints)
                if key is not None and not self._admit(group, key, item, rank):
                    if item.key is None:  # held: jobs behind it of other keys may still go
                        held.append(item)
                        if len(held) >= HELD_SCAN:
                            break  # (and no carry: jobs of this priority may wait behind)
                    continue  # parked behind its key's job in flight
                item.reserved_at = stamp  # a sender that takes it late moves its stamp
                item.lent_by = lent_by
                self._send(group, item)
                n -= 1
                taken += 1
            if held:  # back at the head of the buffer, in their order
                buffer.extendleft(reversed(held))
            # What this priority could not use (its jobs parked, or held behind keys in
            # flight) goes to the next: jobs of other keys may go while a higher job waits for
            # its own key. Not past HELD_SCAN held jobs: jobs of this priority behind them
            # might go (a held high never stops its group for long: a high takes the turn of
            # its key's next lower job, see worker.keys).
            carry = n if len(held) < HELD_SCAN else 0
        return taken

    def _release_parked(self, budget: int, wall: float, mono: float) -> int:
        """Send parked jobs whose endpoints may take them, oldest first (worker.endpoints)."""
        sent = 0

        def go(group: GroupState, item: Buffered) -> bool | None:
            return self._go(group, item, wall)

        for rates in list(self.parking):
            sent += rates.release(budget - sent, mono, go)
        return sent

    def _go(self, group: GroupState, item: Buffered, wall: float) -> bool | None:
        """A parked job's turn at its endpoint: send it now with a grant of its group's quota
        (False: not now), or None when its group is gone."""
        if group.stopped or group.buffers is None:
            return None
        if group.topic.topic.paused or group.topic.room() <= 0:
            return False
        if not group.counter.reserve(1, wall):
            return False
        stamp = group.counter.newest
        key = item.key
        if key is not None and not self._admit(group, key, item, priority_index(item.queue)):
            group.counter.rollback(1, wall)
            if item.key is None:  # held by its key: back to its buffer, in offset order
                group.budget.used -= len(item.payload)  # (put_back counts it again)
                group.put_back(item)
            return True  # (parked behind its key's job in flight: the key lines have it)
        item.reserved_at = stamp
        self._send(group, item)
        return True

    def keyed_done(self, group: GroupState, item: Buffered) -> Buffered | None:
        """The push of a keyed job ended (delivered, handed to retry or the DLQ, or handed back
        to its buffer unsent, ``reserved_at`` < 0: Worker._reserve_again): let its key's next job
        go (see worker.keys). Returns that job when it goes at once (:meth:`_chain`: its quota
        granted, claimed) for the caller, the sender whose push ended, to push next itself."""
        lines, buffers = group.keys, group.buffers
        if lines is None or buffers is None or group.stopped:
            return None  # released or dropped: its parked jobs went with the buffers
        assert item.key is not None
        if item.reserved_at < 0:
            lines.handed_back(item.key, item, priority_index(item.queue))
            return None
        nxt = lines.done(item.key)
        if isinstance(nxt, Buffered):
            rank = priority_index(nxt.queue)
            if self._chain(group, lines, nxt, rank):
                return nxt
            buffers[rank].appendleft(nxt)  # the oldest of its key
        if nxt is not None or buffers[0] or buffers[1] or buffers[2]:
            # Now, not when the group was due (a tick, or its quota's next grant, later): the
            # key's next job, or one held at a buffer's head behind this key, may go. (A key's
            # cycle is then its endpoint's round trip plus a loop iteration.)
            self.wake(group, time.monotonic(), prompt=True)
        return None

    def unfence(self, group: GroupState, until: object, rank: int) -> None:
        """The jobs of ``group`` parked until ``until`` (of priority ``rank``) may go now
        (worker.regroup): back to the front of their buffer, in offset order, each to be
        admitted by its key's line (one of a key in flight) like any other keyed job."""
        lines, buffers = group.keys, group.buffers
        if lines is None or buffers is None or group.stopped:
            return  # released or dropped: its parked jobs went with the buffers
        jobs = [job for job in lines.unfence(until, rank) if isinstance(job, Buffered)]
        if jobs:
            buffers[rank].extendleft(sorted(jobs, key=lambda job: job.offset, reverse=True))
            self.wake(group, time.monotonic(), prompt=True)

    def _chain(self, group: GroupState, lines: KeyLines, item: Buffered, rank: int) -> bool:
        """Send a key's next job now, without a dispatch, if one would have sent it first: no
        job of a higher priority buffered in its group (those go first, through the
        dispatcher), its topic not paused and its endpoint with room and no pace of its own
        (worker.endpoints), and a grant of its group's quota now (one grant per job, as
        dispatched jobs get: the pacing holds). Otherwise it waits in its buffer, as before."""
        claim, buffers, topic = self.claim, group.buffers, group.topic
        if claim is None or buffers is None or topic.topic.paused or topic.room() <= 0:
            return False
        if (rank and buffers[0]) or (rank == 2 and buffers[1]):
            return False
        if topic.rates is not None and topic.rates.watching:
            return False
        wall = time.time()
        if not group.counter.reserve(1, wall):
            return False  # (its wake comes when the counter can grant: see _delay)
        assert item.key is not None
        lines.admit(item.key, item, rank)  # (the key's next: admitted, now in flight)
        item.reserved_at = group.counter.newest
        claim(group, item)
        return True

    @staticmethod
    def _admit(group: GroupState, key: str, item: Buffered, rank: int) -> bool:
        """May a keyed job go now (see worker.keys)? One that may not is parked (it blocks
        neither other keys nor other groups), or, with PARKED_MIN jobs and 2 s of the group's
        quota of its priority parked already (per priority: lows parked by the hundred must
        not hold a high at its buffer's head behind them), *held*: left at the head of its
        buffer (its ``key`` cleared to say so), so that parked jobs (and the fetches that would
        follow) cannot grow unbounded. Held jobs stop neither the jobs of other keys behind them
        (up to HELD_SCAN held looked past) nor the group: what their priority was granted
        and could not use goes to the next (see _take). A job whose key a quota change moved
        here, while its key's earlier jobs of its priority wait in its old group, is parked
        apart until those are done (worker.regroup), or held the same way."""
        lines = group.keys
        if lines is None:
            lines = group.keys = KeyLines()
        park = lines.ranks[rank] < max(PARKED_MIN, 2 * group.counter.qps)
        fences = group.topic.fences
        if fences:  # a quota change moved keys here (worker.regroup)
            until = regroup.waits_for(fences, group.ref.index, key, rank)
            if until is not None:
                if park:
                    lines.fence(until, item, rank)
                else:
                    item.key = None  # held
                return False
        verdict = lines.admit(key, item, rank, park=park)
        if verdict is None:
            item.key = None
            return False
        displaced = lines.displaced
        if displaced is not None:  # (rare: a high took the turn of its key's next low)
            lines.displaced = None
            assert isinstance(displaced, Buffered) and group.buffers is not None
            buffer = group.buffers[priority_index(displaced.queue)]
            if displaced in buffer:
                buffer.remove(displaced)
        return verdict


class Handoff(Generic[T]):
    """The FIFO from the dispatcher to the sender pool, with a limit on jobs held at once.

    ``asyncio.Queue`` minus what the pool never uses (a bound, waiting putters, ``task_done``),
    and with fewer wake-ups: a put wakes an idle sender only when no woken one is on its way, a
    sender that takes a job and sees more wakes the next (a chain, one hop per loop iteration),
    and a sender that finishes takes the next job itself. A queue wakes one sender per job even
    when a running sender takes them all first (each futile wake-up costs a future and two task
    switches). The chain alone can be slow when loop iterations are (a job here has its quota
    taken already; one sent late lands in the next wall-clock second, over the quota at the
    receiver), so the dispatcher calls :meth:`catch_up` every tick: whatever still waits then
    gets a sender each at once.

    ``limit`` caps how many senders hold a job (between :meth:`get` and :meth:`done`, or
    :meth:`release` for a push left to a slow endpoint); the :class:`SendGovernor` moves it.
    Senders over the limit wait like idle ones.
    """

    __slots__ = ("_holding", "_idle", "_items", "_woken", "limit")

    def __init__(self, limit: int = 1 << 30) -> None:
        self._items: deque[T] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._woken = 0  # senders woken and not yet running
        self._holding = 0  # senders between get() and done()
        self.limit = limit

    def qsize(self) -> int:
        return len(self._items)

    def unserved(self) -> int:
        """Jobs waiting with no woken sender on its way to them."""
        return len(self._items) - self._woken

    @property
    def holding(self) -> int:
        return self._holding

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        self._kick()

    def done(self) -> None:
        """The job a sender got is finished (once per :meth:`get`), and the sender comes back
        for the next at once: no other sender is woken for the slot it frees (a wake-up per job
        would rotate the work through every sender's task, the cost the limit is there to
        save). A sender that leaves instead calls :meth:`leave`."""
        self._holding -= 1

    def hold(self) -> bool:
        """A sender whose push just ended goes on with a job handed to it directly (a key's
        next: Dispatcher.keyed_done) instead of :meth:`get`: True, and it holds one more, when
        the limit allows. Even ahead of jobs waiting here: under load some always wait (the
        dispatcher keeps a tick's worth), and a key's next behind them would add their wait
        to every cycle of its key, while they lose one push's time at most (the sender is
        the same one, the jobs at once are not more)."""
        if self._holding >= self.limit:
            return False
        self._holding += 1
        return True

    def leave(self) -> None:
        """A sender stops taking jobs (cancelled): hand its slot to an idle one."""
        self._kick()

    def release(self) -> None:
        """The job a sender holds stops counting against the limit (instead of :meth:`done`):
        its push waits on a slow endpoint, and the slot goes to the next job at once."""
        self._holding -= 1
        self._kick()

    def set_limit(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._kick()

    def _kick(self) -> None:
        """Wake one idle sender if there is a job for it and none is already on its way."""
        if not self._woken:
            self._wake(min(1, len(self._items), self.limit - self._holding))

    def catch_up(self) -> None:
        """Wake an idle sender for every waiting job no woken one is on its way to."""
        self._wake(min(len(self._items), self.limit - self._holding) - self._woken)

    def _wake(self, wake: int) -> None:
        idle = self._idle
        while wake > 0 and idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._woken += 1
                wake -= 1

    async def get(self) -> T:
        items = self._items
        # Nothing to take, or the limit reached: wait (woken, another sender may still have
        # taken the job first, so look again).
        while not items or self._holding >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # woken, then cancelled
                    self._woken -= 1
                    self._kick()  # pass the wake-up on
                raise
            self._woken -= 1
        self._holding += 1
        item = items.popleft()
        self._kick()
        return item


class SendGovernor:
    """How many pushes a worker runs at once: all its senders, unless its CPU is the limit.

    aiohttp's cost per request grows with the requests in flight (on this machine class 55 µs
    at 32, 60 at 64, 79 at 256: more sockets, tasks and buffers per loop turn), so a worker
    whose event loop is saturated delivers *more* with fewer at once. The worker's own work per
    job is least at about 64 at once (86 µs a job against 98 at 32 in ``emq bench dispatch``
    W2): the default floor (``EMQ_WORKER_SENDERS_MIN``). Every ``period_s`` the
    loop thread's CPU share is read: at ``busy`` or more the limit shrinks by a quarter (not
    under ``floor``); under ``idle`` while jobs wait for a sender it grows by a quarter (not
    over ``senders``). Slow endpoints keep the loop idle, so they get every sender; pushes that
    have run for ``stuck_s`` (a hanging endpoint) do not count against the limit: the sender
    pool (:mod:`worker.senders`) detaches them, and reports as ``stuck`` only those it could
    not detach (at its cap).
    """

    def __init__(
        self,
        senders: int,
        floor: int,
        *,
        period_s: float = 0.1,
        busy: float = 0.9,
        idle: float = 0.75,
        stuck_s: float = 0.5,
    ) -> None:
        self.senders = senders
        self.floor = min(floor, senders)
        self.limit = senders
        self.lowest = senders  # the smallest limit so far (for operators and benchmarks)
        self.period_s = period_s
        self.busy = busy
        self.idle = idle
        self.stuck_s = stuck_s
        self._at: float | None = None
        self._cpu = 0.0

    def update(self, mono: float, cpu: float, waiting: int, stuck: int) -> int | None:
        """Feed the monotonic clock and the loop thread's CPU seconds; the limit to apply (with
        ``stuck`` pushes added) when a period has passed, else ``None``."""
        if self._at is None:
            self._at, self._cpu = mono, cpu
            return None
        elapsed = mono - self._at
        if elapsed < self.period_s * 0.99:  # (a clock read a hair early still counts)
            return None
        share = (cpu - self._cpu) / elapsed
        self._at, self._cpu = mono, cpu
        if share >= self.busy:
            self.limit = max(self.floor, self.limit * 3 // 4)
            self.lowest = min(self.lowest, self.limit)
        elif share < self.idle and waiting:
            self.limit = min(self.senders, self.limit + max(4, self.limit // 4))
        return min(self.senders, self.limit + stuck)
