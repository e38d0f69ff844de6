"""Per-group QPS control: a sliding log of grants with pacing, pre-reservation and rollback.

The seed design: the dispatcher *reserves* from a group's counter before taking jobs from its
buffers and *rolls back* what it could not use, so the counter never runs ahead of what was
really sent.

The promise (ARCHITECTURE.md invariant 2) is about *any* one-second window, sliding, not only
wall-clock seconds: receivers that enforce "100 per rolling second" answer 429 to the 101st. A
per-second counter plus a token bucket (the previous design) kept wall-clock seconds at the
quota but let a sliding window hold ``qps + burst`` (measured 1.06-1.08x). So the hard limit is
now a **sliding log**: the stamps of the last ``qps`` grants, in a ring. A grant at ``now`` is
allowed only if the grant ``qps`` grants ago is at least ``window_s`` old. Then no half-open
window of ``window_s`` holds more than ``qps`` grants (``qps + 1`` grants in it would put two
grants ``qps`` apart less than ``window_s`` from each other), wall-clock seconds included, and
a backlogged group gets exactly ``qps`` a window: nothing is lost to rounding.

The log alone would let a group's whole quota go in the first tick of a window; a **token
bucket** (filling at ``qps`` a second, holding ``1 + qps * burst_s``) paces the grants through
the window, as before. It only smooths: the log is what bounds every window.

Rollback undoes the *most recent* grants (the dispatcher rolls back right after reserving, in
the same tick): their stamps leave the log and their tokens go back to the bucket.

Handover: a group that a worker takes over from another may have had ``qps`` sends in the last
second from its former owner, which this counter never saw. The former owner was paced by such a
counter, so its grants in its last ``x`` seconds were at most its bucket's burst plus ``x * qps``
(and ``qps + extra`` in any window). :meth:`QpsCounter.quiet` fills the log with exactly that
worst case: the burst stamped ``now``, one grant per ``1/qps`` before it. The log then holds at
least the former owner's grants in every stretch ending ``now``, so any window across the
handover holds at most ``qps + extra`` grants of both owners, and the new owner goes on at the
full pace about a window after the oldest of those stamps (tens of ms after the claim, not a
silent second: every failover and rebalance would cost each moved group a second of its quota;
a contested claim already waits out its former holder, see ``worker.runtime``). The previous
version spread ``qps`` grants evenly and let a window hold the burst on top (32 at 30 QPS was
seen across a ZooKeeper outage's rebalance).

**Burst** (a topic's ``burst``, split over its groups like its quota): a group may send
``extra`` jobs above the steady pace after idle. The log then holds the last ``qps + extra``
grants and the bucket ``extra`` more tokens; it still fills at ``qps`` a second, so the
sustained rate stays ``qps`` and the extra jobs come back only while the group sends less than
its quota. Any window of ``window_s`` holds at most ``qps + extra`` grants (the same argument as
above with ``qps + extra`` in the log). ``extra = 0`` is exactly the counter without a burst.

**Back-dating** (``back_s``, the worker's LATE_S): a grant may be stamped up to ``back_s`` before
the time it is made, and :meth:`QpsCounter.restamp` moves a late grant to ``back_s`` before its
send, never earlier than the log allows: a grant stamped ``t`` needs the grant ``qps + extra``
before it to be a window older than ``t``, as if it had been made at ``t``. So every window still
holds at most ``qps + extra`` stamps, and each stamp lies at most ``back_s`` before its job's send
(the caller's rule: a job is sent at most ``back_s`` after its stamp, else restamped). What it
buys: a backlogged group's log is self-clocked (a grant waits for the one ``qps`` before it to
leave the window), so a dispatcher late by ``d`` to a freed grant used to lose ``d`` for good,
every window; now only what passes ``back_s`` is lost. (Only such grants are back-dated: a group
with room to spare stamps ``now``.) The receiver's bound is unchanged: it sees
sends at most ``back_s`` after their stamps, as before. The stamps a window old leave the log; the
newest of them is kept (``_gone``) to bound the grant ``qps + extra`` back of a new one.

**Spare lane** (``spare``, a class attribute: the worker's ``SpareLaneLog`` sets 1): the log
holds ``qps + extra + spare`` grants while the bucket still pays one token each and fills at
``qps`` a second. The sustained rate stays ``qps`` (the bucket bounds any stretch of ``x``
seconds by its burst plus ``x * qps``) and any window of ``window_s`` holds at most
``qps + extra + spare`` stamps (the argument above with that many in the log). What it buys: a
backlogged group's log is self-clocked, so a lane whose job was late by more than ``back_s``
comes free that much later, and with exactly ``qps`` lanes the group falls below its quota by
what its lanes lose (1-3 % on a worker whose CPU another process takes). One lane more than
the quota lets the bucket, not the lanes, set the pace: a late lane is covered by the spare
one. It spends the promise's slack of one job per group in any second (ARCHITECTURE.md
invariant 2), so it is only for a caller whose every send lies within its stamp's window
(the worker's lean client; see ``worker.groups``). :meth:`QpsCounter.quiet` counts the
former owner's spare lane too.

Time is wall-clock seconds (windows align with receivers'). A clock that steps back by more than
a window empties the log (stamps from the "future" would otherwise stall the group until the
clock catches up); a smaller step back is treated as no time passing.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque

EPSILON = 1e-9  # tokens accrue in floats: 0.9999999999 of a token is one


# A grant is back-dated only if the log held the group back this recently (see _stamp_for).
HELD_LATELY_S = 0.1

_NO_LOG: deque[float] = deque(maxlen=0)  # the log of every counter that never granted


class QpsCounter:
    """One group's budget. ``now`` is wall-clock seconds."""

    # How far before it is made a grant may be stamped (see "Back-dating"); a class attribute
    # (a subclass sets it): a worker holds one counter per group, thousands of them idle.
    back_s = 0.0
    # Grants the log holds beyond ``qps + extra`` that the bucket does not pay for (see "Spare
    # lane"); a class attribute like ``back_s``.
    spare = 0

    __slots__ = (
        "_gone",
        "_log",
        "_stamp",
        "_tokens",
        "burst_s",
        "extra",
        "qps",
        "window_s",
    )

    def __init__(
        self,
        qps: int,
        *,
        burst_s: float = 0.03,
        window_s: float = 1.0,
        extra: int = 0,
    ) -> None:
        self.qps = qps
        self.extra = extra  # jobs above the steady pace after idle (see "Burst")
        self.burst_s = burst_s
        self.window_s = window_s
        self._gone = -math.inf  # the newest stamp that left the log
        # Stamps of the last (up to) qps grants, oldest first. A deque costs 760 bytes even
        # empty: a worker owning thousands of idle groups shares one that stays empty (maxlen 0)
        # until a group's first grant.
        self._log: deque[float] = _NO_LOG
        self._tokens = 0.0
        self._stamp: float | None = None

    @property
    def burst(self) -> float:
        return 1.0 + self.qps * self.burst_s + self.extra

    def _advance(self, now: float) -> float:
        """Refill the bucket up to ``now``; returns the time to stamp grants with."""
        stamp = self._stamp
        if stamp is None:
            self._tokens = self.burst
        elif now < stamp:  # the wall clock stepped back
            if stamp - now > self.window_s:
                self._log.clear()
                self._gone = -math.inf
            else:
                now = stamp
        else:
            self._tokens = min(self.burst, self._tokens + (now - stamp) * self.qps)
        self._stamp = now
        return now

    def _log_room(self, now: float) -> int:
        """Grants the sliding log allows at ``now`` (stamps a window old leave it)."""
        log, most = self._log, self.qps + self.extra + self.spare
        limit = now - self.window_s  # (no epsilon: the bound is exact, rounding only delays)
        while log and (log[0] <= limit or len(log) > most):  # (more: quota lowered)
            self._gone = log.popleft()  # (the log is sorted: the newest gone so far)
        return most - len(log)

    def _stamp_for(self, now: float) -> float:
        """The stamp of a grant made at ``now`` (see "Back-dating"): when the log held grants
        back until lately (its newest stamp gone, ``_gone``, left the window less than
        HELD_LATELY_S ago), as early as allowed: ``back_s`` before ``now``, not before the
        grant was free (a window after ``_gone``) nor before the newest stamp (the log stays
        sorted). Else ``now``: a grant made with room to spare would only be moved again at
        its send (Worker._reserve_again), for nothing."""
        free_at = self._gone + self.window_s
        if now - HELD_LATELY_S < free_at < now:
            log = self._log
            stamp = max(free_at, now - self.back_s)
            return max(stamp, log[-1]) if log else stamp
        return now

    def available(self, now: float) -> int:
        """What :meth:`reserve` would grant right now."""
        now = self._advance(now)
        return max(0, min(math.floor(self._tokens + EPSILON), self._log_room(now)))

    def wait_s(self, now: float) -> float:
        """Seconds from ``now`` until :meth:`reserve` can grant one (0: now). The dispatcher
        comes back exactly then: looking again a tick later would delay every grant of a
        backlogged group by part of a tick, and the log chains those delays (a grant waits for
        the one ``qps`` grants before it), so the sustained rate would fall by the mean delay
        per window."""
        now = self._advance(now)
        token_wait = max(0.0, (1.0 - self._tokens - EPSILON) / self.qps) if self.qps > 0 else 1.0
        log = self._log
        log_wait = 0.0
        if self._log_room(now) <= 0 and log:
            log_wait = max(0.0, log[0] + self.window_s - now)
        return max(token_wait, log_wait)

    def log_full(self, now: float) -> bool:
        """Whether the sliding log holds the next grant back at ``now`` (its last ``qps +
        extra + spare`` grants all in the window), not only the bucket. A log-bound group is
        self-clocked: a grant made late delays the one a window after it."""
        return self._log_room(self._advance(now)) <= 0

    def reserve(self, want: int, now: float) -> int:
        """Take up to ``want`` from the budget; returns how many were granted."""
        if want <= 0:
            return 0
        now = self._advance(now)
        grant = max(0, min(want, math.floor(self._tokens + EPSILON)))
        if grant == 0:
            return 0
        grant = min(grant, self._log_room(now))
        if grant > 0:
            if self._log is _NO_LOG:
                self._log = deque()
            self._log.extend([self._stamp_for(now)] * grant)
            self._tokens -= grant
        return grant

    @property
    def newest(self) -> float:
        """The stamp of the grants :meth:`reserve` just made (the newest in the log)."""
        return self._log[-1]

    def rollback(self, unused: int, now: float) -> None:
        """Undo the ``unused`` most recent grants (``now`` is unused: kept for the callers)."""
        unused = min(unused, len(self._log))
        if unused <= 0:
            return
        for _ in range(unused):
            self._log.pop()
        self._tokens = min(self.burst, self._tokens + unused)

    def restamp(self, granted_at: float, now: float) -> float | None:
        """A grant stamped ``granted_at`` is used only now (its job waited for a sender): move
        its stamp to ``now`` (less ``back_s``, not before ``granted_at``), so the log counts it
        where the receiver sees it; returns the new stamp. Always possible while the old stamp
        is in the last window (every window holding the new stamp and ending by ``now`` held
        the old one too), and free (no token: it was paid); a grant older than a window is gone
        from the log, and this is a new :meth:`reserve` of one. None: no budget now.

        ``now`` may lie before times the counter was asked at since (a request's write, told
        when its answer came, the dispatcher granting meanwhile): the stamp goes to the write,
        not to the counter's clock. Later than the send, a stamp would hold back the grants
        after it for nothing (the window counts a request where the receiver saw it)."""
        at = now  # (_advance returns the counter's clock: later, when now lies before it)
        now = self._advance(now)
        self._log_room(now)  # (drops stamps a window old)
        log = self._log
        if log and log[-1] == granted_at:
            # The newest grant (a backlogged group's log frees one or two at a time): its stamp
            # moves later, the log stays sorted. (Of equal stamps, moving the last leaves the
            # same log as moving any.)
            stamp = max(granted_at, at - self.back_s)
            log[-1] = stamp
            return stamp
        if log and log[0] <= granted_at <= log[-1]:
            # The log is sorted (stamps go on at the right, at the latest time; quiet() builds
            # it in order; a moved stamp is put in its place), so the grant is found by
            # bisection: log.remove compared it with every older stamp, up to qps of them, for
            # most jobs of a busy worker. Equal stamps sit together: removing the last of them
            # leaves the same log.
            i = bisect_right(log, granted_at) - 1
            if log[i] == granted_at:
                del log[i]
                stamp = max(granted_at, at - self.back_s)
                if not log or stamp >= log[-1]:
                    log.append(stamp)
                else:
                    log.insert(bisect_right(log, stamp), stamp)
                return stamp
        return self._log[-1] if self.reserve(1, now) else None

    def quiet(self, now: float) -> None:
        """Count the last window as the former owner's worst case (see "Handover" in the module
        docstring): its bucket's burst spent just now, and before that one grant per interval
        (at most ``burst + x * qps`` in its last ``x`` seconds, as its own counter allowed)."""
        self._advance(now)
        most = self.qps + self.extra + self.spare
        whole = min(most, math.floor(self.burst + EPSILON))
        part = max(0.0, self.burst - whole)  # a fraction of a token brings the next one nearer
        step = 1.0 / max(1, self.qps)
        paced = [now - step * (k - part) for k in range(most - whole, 0, -1)]
        self._log = deque([*paced, *([now] * whole)])
        self._tokens = 0.0

    def set_qps(self, qps: int, extra: int | None = None) -> None:
        """Apply a new quota (and burst) at once; grants of the last window still count."""
        self.qps = qps
        if extra is not None:
            self.extra = extra
        self._tokens = min(self._tokens, self.burst)
