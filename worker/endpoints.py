"""Adaptive per-endpoint rates and endpoint auto-disable: one topic's endpoints on this worker.

An endpoint is a job URL's ``host:port`` (:func:`emq.core.endpoints.endpoint_of`). A topic whose
:class:`~emq.core.endpoints.EndpointPolicy` is active gets an :class:`EndpointRates` on its
:class:`~worker.groups.TopicState`; the others have none and pay nothing.

States of one endpoint::

    OPEN --429/503 | p90 latency > latency_ms--> LIMITED (rate x decrease, at most once a second)
    LIMITED --rate + increase_qps per second reaches the topic's quota--> OPEN
    OPEN | LIMITED --429/503 with Retry-After--> HELD (nothing sent until then) --> LIMITED

**Learning an endpoint's limit.** While an endpoint is LIMITED its 2xx answers of the last
second are counted: a 429/503 then says how much it takes (``capacity``, those answers), and
its rate goes to :data:`KEEP` of that rather than ``decrease`` times the rate; it climbs back
by ``increase_qps`` to :data:`KEEP` of the capacity remembered (a second that took less, answers
late on a busy worker, lowers it only to :data:`CAPACITY_KEPT` of what it was), and from there
only by :data:`PROBE_PER_S` of it per second (until 20 % past it, then by ``increase_qps``
again), so the endpoint is asked for more only every twenty seconds or so. A
``Retry-After`` holds the endpoint for that long and sets the rate the same way: the hold is
the endpoint's answer to the excess, and a cut on top left a 40/s endpoint 24/s. A 429 met
while OPEN (nothing counted yet) and a slow p90 cut by ``decrease``.
    any --disable_after consecutive failures spanning disable_after_s--> DISABLED
    DISABLED --an operator's re-enable (the topic's policy)--> LIMITED (at quota x decrease)

The dispatcher asks :meth:`EndpointRates.admit` for every job of a topic with an endpoint not
OPEN (``watching``; O(1), no await): a job whose endpoint may not send now is *parked* here, in
its endpoint's FIFO, without its group's grant and without a push, so waiting never burns an
attempt. Each tick the dispatcher releases parked jobs at their endpoint's pace
(:meth:`release`, a GCRA: one job per ``1/rate``), each with a fresh grant of its group's
quota. At :func:`park_cap` jobs parked on one endpoint, the next one *overflows*: the dispatcher
hands it back to its group's delayed set as stored (``Outcomes.defer``: no attempt burnt), due
when the parked ones will have gone (a disabled endpoint's: ``DISABLED_DEFER_S`` later), so
memory stays bounded and the topic's other endpoints never wait behind it. (Keyed jobs: one
that overflows may be overtaken by a later job of its key.) Parked jobs stay unfinished: the
checkpoint does not pass them, and a group released meanwhile forgets them (:meth:`forget`) for
its next owner to fetch again.

Push outcomes feed :meth:`pushed`. A success costs nothing unless the topic has a latency
threshold or an endpoint with a failure streak.

Per worker: a topic's groups may live on several workers, and each follows the 429s, latency
and failures that its own pushes see. A topic within one group's cap (``max_group_qps``, 150 by
default) lives on one worker and is exactly right; a larger one converges like TCP flows that
share a link (each worker backs off on its own 429s), and a re-enable reaches every worker
through the topic's configuration. At most ``cap`` endpoints per topic are followed (bounded
metrics); past that, OPEN ones are forgotten first, and new ones stay untracked.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emq.core.endpoints import EndpointPolicy, endpoint_of
from emq.core.interfaces import PushResult

if TYPE_CHECKING:
    from worker.groups import Buffered, GroupState, TopicState

THROTTLE_STATUSES = frozenset({429, 503})
CUT_GAP_S = 1.0  # one cut per second at most: the answers to what was sent at the old rate
LATENCY_SAMPLES = 20  # p90 over the last this many successful pushes, judged every this many
PARK_MIN = 256  # jobs parked on one endpoint at least, before the next is held in its buffer
PARK_S = 10.0  # ... or this many seconds of the topic's quota
MAX_HOLD_S = 3600.0
DISABLED_DEFER_S = 60.0  # a job past the parked ones of a disabled endpoint is due again then
TAT_CREDIT_S = 0.01  # a Retry-After longer than this holds the endpoint this long
KEEP = 0.9  # after a 429/503 the rate goes to this share of what the endpoint took in 1 s
PROBE_PER_S = 0.0025  # ... and rises by this share of that per second up to it and past it
PROBE_SPAN = 1.2  # ... up to this multiple of it, before increase_qps applies again
MIN_COUNTED = 3  # answers counted in the last second for a capacity to be believed
CAPACITY_KEPT = 0.9  # a lower count than the capacity remembered lowers it to this share

# release(): may the parked job go? True: sent; False: not now (its group at quota, its topic
# paused or full); None: its group is gone (dropped here).
Go = Callable[["GroupState", "Buffered"], "bool | None"]


def follow(state: TopicState, parking: set[EndpointRates], cap: int) -> None:
    """Give ``state`` per-endpoint rates when its topic's policy asks for them, or pass a
    changed policy on (a re-enable, new settings)."""
    policy = state.topic.endpoints
    if state.rates is not None:
        state.rates.configure(policy)
    elif policy.active:
        state.rates = EndpointRates(policy, lambda: float(state.topic.qps), parking, cap)


def park_cap(quota: float) -> int:
    return max(PARK_MIN, int(PARK_S * quota))


class Endpoint:
    """One endpoint's rate, hold, failure streak and parked jobs (see the module)."""

    __slots__ = (
        "capacity",
        "counted_from",
        "cut_at",
        "disabled",
        "disabled_ms",
        "failing_since",
        "failures",
        "hold_until",
        "hold_until_wall",
        "latencies",
        "name",
        "oks",
        "parked",
        "raised_at",
        "rate",
        "reason",
        "reason_at",
        "tat",
        "throttled",
    )

    def __init__(self, name: str, rate: float) -> None:
        self.name = name
        self.rate = rate
        self.tat = 0.0  # GCRA: monotonic time the next job may go at
        self.raised_at = 0.0  # monotonic: the rate was last raised (additively) to now
        self.cut_at = -math.inf
        self.hold_until = 0.0  # monotonic (Retry-After)
        self.hold_until_wall = 0.0
        self.disabled = False
        self.disabled_ms = 0
        self.failures = 0  # consecutive
        self.failing_since = 0.0  # wall clock, the streak's first failure
        self.throttled = 0  # 429/503 answers, in all
        self.reason = ""
        self.reason_at = 0.0  # wall clock
        self.parked: deque[tuple[GroupState, Buffered]] = deque()
        self.latencies: list[float] = []
        self.oks: deque[float] = deque()  # monotonic times of the last second's 2xx (LIMITED)
        self.counted_from = math.inf  # monotonic: 2xx answers are counted since then
        self.capacity = 0.0  # 2xx answers in the second before its last 429/503 (0: unknown)

    def state(self, ceiling: float, mono: float) -> str:
        if self.disabled:
            return "disabled"
        if mono < self.hold_until:
            return "held"
        return "limited" if self.rate < ceiling else "open"


class EndpointRates:
    """One topic's endpoints on this worker (see the module)."""

    def __init__(
        self,
        policy: EndpointPolicy,
        ceiling: Callable[[], float],
        parking: set[EndpointRates],
        cap: int = 64,
    ) -> None:
        self.policy = policy
        self._ceiling = ceiling  # the topic's quota: the most an endpoint's rate rises to
        self._parking = parking  # the dispatcher's set of topics with parked jobs
        self.cap = cap
        self.endpoints: dict[str, Endpoint] = {}
        self.watching = False  # an endpoint is not OPEN: the dispatcher asks admit() per job
        self.failing = 0  # endpoints with a failure streak: successes are looked at
        self.parked = 0
        self.untracked = 0  # endpoints not followed (the cap reached)
        self.overflow_s = 0.0  # admit() said None: the job may come back this much later

    # ------------------------------------------------------------------ configuration

    def configure(self, policy: EndpointPolicy, wall_ms: int | None = None) -> None:
        """Take a new policy; re-enable what an operator's mark covers."""
        self.policy = policy
        for ep in self.endpoints.values():
            marked = policy.enabled_since(ep.name) >= ep.disabled_ms
            if ep.disabled and (marked or not policy.disable_after):  # (or disabling turned off)
                self._enable(ep, wall_ms)
            if not policy.adaptive and not ep.disabled:
                ep.rate, ep.hold_until = self._ceiling(), 0.0
        self.refresh(time.monotonic())

    def _enable(self, ep: Endpoint, wall_ms: int | None) -> None:
        ep.disabled, ep.failures = False, 0
        ep.rate = max(self.policy.min_qps, self._ceiling() * self.policy.decrease)
        ep.raised_at = time.monotonic()
        ep.reason = "re-enabled by an operator"
        ep.reason_at = (wall_ms / 1000) if wall_ms else time.time()

    # ------------------------------------------------------------------ the dispatcher's side

    def admit(self, group: GroupState, item: Buffered, mono: float) -> bool | None:
        """May ``item`` be sent now? True: yes (its endpoint's pace taken); False: parked
        here; None: too many parked on its endpoint: the dispatcher hands it to the delayed set
        for ``overflow_s`` (or, without one, leaves it at the head of its buffer)."""
        ep = self.endpoints.get(endpoint_of(item.read_url()))
        if ep is None:
            return True
        ceiling = self._ceiling()
        if not ep.parked and self._may(ep, ceiling, mono):
            self._took(ep)
            return True
        if len(ep.parked) >= park_cap(ceiling):
            # When the parked ones will have gone (a disabled endpoint: a while)
            drained = max(ep.hold_until - mono, len(ep.parked) / ep.rate)
            self.overflow_s = DISABLED_DEFER_S if ep.disabled else drained
            return None
        ep.parked.append((group, item))
        self.parked += 1
        self._parking.add(self)
        return False

    def _may(self, ep: Endpoint, ceiling: float, mono: float) -> bool:
        if ep.disabled or mono < ep.hold_until:
            return False
        if ep.rate < ceiling:  # additive increase, for the time since the last raise
            ep.rate = min(ceiling, ep.rate + self._step(ep) * (mono - ep.raised_at))
        ep.raised_at = mono
        if ep.rate >= ceiling:
            if ep.counted_from != math.inf:  # OPEN again: nothing more to learn
                ep.counted_from, ep.capacity = math.inf, 0.0
                ep.oks.clear()
            return True  # OPEN: the group's quota is the only pace
        # A tick's credit at most: a release a tick late keeps the average pace, and idle time
        # earns no burst.
        ep.tat = max(ep.tat, mono - TAT_CREDIT_S)
        return ep.tat <= mono

    def _step(self, ep: Endpoint) -> float:
        """How fast the rate rises (per second): slowly around a learned capacity."""
        capacity = ep.capacity
        if capacity and capacity * KEEP <= ep.rate < capacity * PROBE_SPAN:
            return min(self.policy.increase_qps, capacity * PROBE_PER_S)
        return self.policy.increase_qps

    @staticmethod
    def _took(ep: Endpoint) -> None:
        if ep.rate > 0:
            ep.tat += 1.0 / ep.rate

    def release(self, budget: int, mono: float, go: Go) -> int:
        """Send up to ``budget`` parked jobs their endpoints' pace allows; returns how many."""
        sent = 0
        ceiling = self._ceiling()
        for ep in list(self.endpoints.values()):
            parked = ep.parked
            while parked and sent < budget and self._may(ep, ceiling, mono):
                group, item = parked[0]
                verdict = go(group, item)
                if verdict is False:
                    break
                parked.popleft()
                self.parked -= 1
                if verdict is None:
                    group.budget.used -= len(item.payload)  # gone with its group
                    continue
                self._took(ep)
                sent += 1
        if not self.parked:
            self._parking.discard(self)
        self.refresh(mono)
        return sent

    def next_due(self) -> float:
        """When (monotonic) a parked job may go next; infinity while every endpoint with
        parked jobs is disabled."""
        due = math.inf
        for ep in self.endpoints.values():
            if ep.parked and not ep.disabled:
                due = min(due, max(ep.hold_until, ep.tat - TAT_CREDIT_S))
        return due

    def forget(self, group: GroupState) -> None:
        """``group`` is released or dropped: its parked jobs go (its next owner fetches them)."""
        for ep in self.endpoints.values():
            if not any(g is group for g, _ in ep.parked):
                continue
            kept: deque[tuple[GroupState, Buffered]] = deque()
            for g, item in ep.parked:
                if g is group:
                    group.budget.used -= len(item.payload)  # (parked jobs stay counted)
                    self.parked -= 1
                else:
                    kept.append((g, item))
            ep.parked = kept
        if not self.parked:
            self._parking.discard(self)

    def refresh(self, mono: float) -> None:
        """Recount whether any endpoint is not OPEN or has jobs parked (``watching``)."""
        ceiling = self._ceiling()
        self.watching = any(
            ep.parked or ep.state(ceiling, mono) != "open" for ep in self.endpoints.values()
        )

    # ------------------------------------------------------------------ push outcomes

    def pushed(self, item: Buffered, result: PushResult, mono: float) -> None:
        """Feed one push's outcome (a 2xx costs nothing unless latency or a streak is followed)."""
        status = result.status
        ok = 200 <= status < 300
        if ok and not self.failing and not self.policy.latency_ms and not self.watching:
            return
        ep = self._endpoint(endpoint_of(item.read_url()))
        if ep is None:
            return
        if ok:
            if ep.counted_from <= mono:  # (LIMITED: its capacity is being learned)
                ep.oks.append(mono)
                while ep.oks[0] <= mono - 1.0:
                    ep.oks.popleft()
            if ep.failures:
                ep.failures = 0
                self.failing -= 1
            if self.policy.latency_ms:
                self._latency(ep, result.elapsed_s * 1000, mono)
            return
        if status in THROTTLE_STATUSES:
            ep.throttled += 1
            if self.policy.adaptive:
                self._throttled(ep, status, result.retry_after_s, mono)
        if status != 429:  # (a 429 is flow control, not a failure: the rate answers it)
            self._failed(ep)
        self.refresh(mono)

    def _throttled(
        self, ep: Endpoint, status: int, retry_after_s: float | None, mono: float
    ) -> None:
        now = time.time()
        if retry_after_s:
            hold = min(retry_after_s, MAX_HOLD_S)
            if mono + hold > ep.hold_until:
                ep.hold_until, ep.hold_until_wall = mono + hold, now + hold
                ep.reason, ep.reason_at = f"Retry-After until {_hms(now + hold)}", now
        self._cut(ep, f"{status} at {_hms(now)}", mono, now, throttled=True)

    def _cut(
        self, ep: Endpoint, reason: str, mono: float, now: float, throttled: bool = False
    ) -> None:
        if mono - ep.cut_at < CUT_GAP_S:
            return
        ceiling = self._ceiling()
        took = self._took_in_last_second(ep, mono) if throttled else 0
        if took:  # what it took: keep just under it (see the module)
            # A second that took less than before (answers late on a busy worker, a burst)
            # lowers the remembered capacity only a little: the rate climbs back quickly.
            ep.capacity = max(float(took), ep.capacity * CAPACITY_KEPT)
            ep.rate = max(self.policy.min_qps, min(took, ceiling) * KEEP)
        else:
            ep.rate = max(self.policy.min_qps, min(ep.rate, ceiling) * self.policy.decrease)
        ep.counted_from = min(ep.counted_from, mono)
        ep.cut_at = ep.raised_at = mono
        ep.tat = max(ep.tat, mono)
        if mono >= ep.hold_until:  # (a hold's reason says more while it lasts)
            ep.reason, ep.reason_at = reason, now

    @staticmethod
    def _took_in_last_second(ep: Endpoint, mono: float) -> int:
        """2xx answers of the last second, if they were counted all that second (else 0)."""
        if ep.counted_from > mono - 1.0:
            return 0
        oks = ep.oks
        while oks and oks[0] <= mono - 1.0:
            oks.popleft()
        return len(oks) if len(oks) >= MIN_COUNTED else 0

    def _latency(self, ep: Endpoint, ms: float, mono: float) -> None:
        samples = ep.latencies
        samples.append(ms)
        if len(samples) < LATENCY_SAMPLES:
            return
        p90 = sorted(samples)[int(0.9 * len(samples))]
        samples.clear()
        limit = self.policy.latency_ms
        if self.policy.adaptive and p90 > limit:
            self._cut(ep, f"latency p90 {p90:.0f} ms > {limit} ms", mono, time.time())
            self.refresh(mono)

    def _failed(self, ep: Endpoint) -> None:
        now = time.time()
        if not ep.failures:
            self.failing += 1
            ep.failing_since = now
        ep.failures += 1
        n, span = self.policy.disable_after, self.policy.disable_after_s
        if n and not ep.disabled and ep.failures >= n and now - ep.failing_since >= span:
            ep.disabled, ep.disabled_ms = True, int(now * 1000)
            ep.reason = f"disabled after {ep.failures} consecutive failures since " + _hms(
                ep.failing_since
            )
            ep.reason_at = now

    def _endpoint(self, name: str) -> Endpoint | None:
        ep = self.endpoints.get(name)
        if ep is not None:
            return ep
        if len(self.endpoints) >= self.cap and not self._evict():
            self.untracked += 1
            return None
        ep = self.endpoints[name] = Endpoint(name, float(self._ceiling()))
        return ep

    def _evict(self) -> bool:
        """Forget one endpoint that is OPEN, healthy and has nothing parked."""
        ceiling, mono = self._ceiling(), time.monotonic()
        for name, ep in self.endpoints.items():
            if not ep.parked and not ep.failures and ep.state(ceiling, mono) == "open":
                del self.endpoints[name]
                return True
        return False

    # ------------------------------------------------------------------ what operators see

    def waits(self, group: GroupState, mono: float, wall: float) -> dict[str, list[Any]]:
        """Every endpoint not OPEN, for ``group``'s snapshot (job status): its state, rate,
        hold's end (epoch ms) and, by priority, the oldest of the group's jobs parked on it
        (:class:`emq.core.jobs.EndpointWait` as a list)."""
        ceiling = self._ceiling()
        out: dict[str, list[Any]] = {}
        for ep in self.endpoints.values():
            state = ep.state(ceiling, mono)
            if state == "open" and not ep.parked:
                continue
            oldest: dict[str, str] = {}
            for g, item in ep.parked:
                if g is group:
                    oldest.setdefault(item.queue.priority.value, str(item.offset))
            held = state == "held"
            until = int((wall + ep.hold_until - mono) * 1000) if held else None
            rate = 0.0 if ep.disabled else round(min(ep.rate, ceiling), 2)
            out[ep.name] = [state, rate, until, oldest]
        return out

    def has_parked(self, group: GroupState) -> bool:
        return any(g is group for ep in self.endpoints.values() for g, _ in ep.parked)

    def status(self, mono: float) -> list[dict[str, Any]]:
        """Every followed endpoint: state, current rate and why (for the API and metrics)."""
        ceiling = self._ceiling()
        out = []
        for ep in self.endpoints.values():
            state = ep.state(ceiling, mono)
            out.append(
                {
                    "endpoint": ep.name,
                    "state": state,
                    "rate_qps": round(min(ep.rate, ceiling), 2) if not ep.disabled else 0.0,
                    "reason": ep.reason,
                    "reason_at": round(ep.reason_at, 3) if ep.reason_at else None,
                    "hold_until": round(ep.hold_until_wall, 3) if state == "held" else None,
                    "parked": len(ep.parked),
                    "failures": ep.failures,
                    "throttled": ep.throttled,
                }
            )
        return out


def _hms(wall: float) -> str:
    """A wall-clock time as operators read it: ISO 8601 UTC to the millisecond."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}Z"
    )
