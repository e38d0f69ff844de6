"""Per-group QPS control: a per-second counter with pacing, pre-reservation and rollback.

The seed design: each group has a counter for the current wall-clock second; the dispatcher
*reserves* from it before taking jobs from the group's buffers and *rolls back* what it could not
use, so the counter never runs ahead of what was really sent.

A counter alone lets the whole quota go at the start of each second (or at once when an idle
group wakes mid-second), and a receiver counting over windows that straddle two seconds then
sees far more than the quota (a prototype measured 1.21x). So grants are also paced by a token
bucket filling at ``qps`` per second and holding at most ``burst = 1 + qps * burst_s`` (one
whole token plus ``burst_s``, 30 ms by default, of accrual: enough that a slow quota loses
nothing between ticks and a dispatcher late by a few tens of milliseconds loses no budget). Any
one-second window, aligned with the wall clock or not, then holds at most ``qps + burst`` sends,
each wall-clock second at most ``qps``, and a backlogged group still gets its full quota.
"""

from __future__ import annotations

import math


class QpsCounter:
    """One group's budget. ``now`` is wall-clock seconds (so seconds align with receivers')."""

    __slots__ = ("_second", "_stamp", "_tokens", "_used", "burst_s", "qps")

    def __init__(self, qps: int, *, burst_s: float = 0.03) -> None:
        self.qps = qps
        self.burst_s = burst_s
        self._second = -1
        self._used = 0
        self._tokens = 0.0
        self._stamp: float | None = None

    @property
    def burst(self) -> float:
        return 1.0 + self.qps * self.burst_s

    def _advance(self, now: float) -> None:
        second = math.floor(now)
        if second != self._second:
            self._second = second
            self._used = 0
        if self._stamp is None:
            self._tokens = self.burst
        else:  # the wall clock may step back: never refill negatively
            self._tokens = min(self.burst, self._tokens + max(0.0, now - self._stamp) * self.qps)
        self._stamp = now

    def available(self, now: float) -> int:
        """What :meth:`reserve` would grant right now."""
        self._advance(now)
        return max(0, min(math.floor(self._tokens + 1e-9), self.qps - self._used))

    def reserve(self, want: int, now: float) -> int:
        """Take up to ``want`` from the budget; returns how many were granted."""
        grant = min(want, self.available(now))
        if grant > 0:
            self._used += grant
            self._tokens -= grant
        return grant

    def rollback(self, unused: int, now: float) -> None:
        """Return ``unused`` reserved requests (to this second's count only if still in it)."""
        if unused <= 0:
            return
        self._tokens = min(self.burst, self._tokens + unused)
        if math.floor(now) == self._second:
            self._used = max(0, self._used - unused)

    def set_qps(self, qps: int) -> None:
        """Apply a new quota at once; what this second already used still counts."""
        self.qps = qps
        self._tokens = min(self._tokens, self.burst)
