"""What a worker holds for the topics and groups it owns: buffers, counters, progress, stats.

A :class:`GroupState` lives from the moment the worker claims the group (with its epoch) until
it releases it or is fenced. Its three buffers hold fetched jobs in offset order; its
:class:`~worker.progress.Progress` per queue holds everything fetched and not yet finished.

Ownership lifecycle of a group on this worker (:class:`Lifecycle`, one method per transition;
an illegal transition is a bug and raises :class:`IllegalTransition`)::

    CLAIMING --contest()--> CONTESTED_WAIT --abandon()--------------------------> RELEASED
       |                         | own()   (after CONTESTED_WAIT_S: the former      ^
       | own()                   v          holder's last word has run out)         |
       +-------------------->  OWNED --release()--> RELEASING --released()----------+
                                 |                      |
                                 +------ drop() --------+--> DROPPED
                                  (fenced: another worker claimed it; nothing more is written)

- CLAIMING: claimed in the store at its epoch, checkpoints read; not yet registered, so no fetch
  or dispatch sees it.
- CONTESTED_WAIT: the claim found a former holder that never released the group (killed, or cut
  off): the worker waits until that holder's pushes must have stopped. Not registered either;
  assigned away meanwhile, it is given up (``abandon``: RELEASED without ever being served, its
  hold kept so that its next owner waits the former holder out too).
- OWNED: registered; fetched from, dispatched, checkpointed, trimmed.
- RELEASING: handed over: no more fetching or dispatching; in-flight pushes end, the final
  checkpoint and trim are written.
- RELEASED: its hold let go and forgotten: nothing more is written.
- DROPPED: fenced (a newer owner's claim, a fenced write): forgotten at once, nothing written.

RELEASED and DROPPED are final. ``stopped`` (no fetching or dispatching) and ``dropped`` (no
writes either) are read-only views of the state for the hot path. The fetch and dispatch
scheduling flags (``hot``, ``queued_fetch``, ``scheduled``) are not ownership and stay plain.
"""

from __future__ import annotations

import enum
import math
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from capacity.priority import WeightedPlanner
from capacity.rate import QpsCounter
from emq.core.interfaces import Checkpoint, Offset, Pusher
from emq.core.latency import E2E_BUCKETS_S as _E2E_BUCKETS_S
from emq.core.model import (
    PRIORITIES,
    Delivery,
    Envelope,
    GroupRef,
    PriorityMode,
    QueueRef,
    Topic,
    TopicRef,
)
from worker.endpoints import EndpointRates
from worker.keys import KeyLines
from worker.progress import Progress

if TYPE_CHECKING:
    from worker.regroup import Fence

# Each grant counts for a window of 1 s + LATE_S + the pusher's write margin
# (emq.core.interfaces.Pusher.write_margin_s): a job goes out at most LATE_S after its grant's
# stamp (later, the stamp moves to LATE_S before its send), plus the time from the last look at
# its grant to its write, loopback and the receiver's kernel stamp. A backlogged group's grants
# a quota apart are exactly this far apart, and each millisecond of the window is 0.1 % of such
# a group's rate.
# aiohttp writes after awaits of its own (its check to write measured beside a busy loop: p99.9
# 1.7 ms, p99.99 5.3 ms, max 18 ms): its margin is 5 ms, and the window 1.007 s.
# The lean client asks the grant (the request's gate) right before each write and tells when it
# wrote; a write later than its margin after the gate has its grant moved to the write
# (worker.runtime._written_late), long before the grant a quota later is made. So a receiver
# sees every request at most LATE_S + the margin after its stamp, whatever the margin: the
# margin only sets how many grants are moved (at 0, a quarter of them in a scratch run beside a
# busy loop; at 0.5 ms, 3 in 10 000 under W3 beside a busy loop: the write follows the gate by
# 34-57 us at the median, 0.15-0.19 ms at p99.9). Its window is 1.0025 s. (A receiver that
# stamps a request at its own read, not at the kernel's arrival, sees it a stall late and can
# count one too many in a sliding second: the test sinks stamp with the kernel, emq.rigs.stamped.)
#
# Why LATE_S is small (2 ms; it was 10): a backlogged group's log is self-clocked, so one of its
# grant "lanes" cycles every 1 s + margin + max(LATE_S, X), X being how late its job reached a
# sender after the lane was free (the dispatcher's lateness plus the wait for a sender: one turn
# of the event loop, 7 ms at the median under W3, 12 ms beside a busy loop). A larger LATE_S
# hides the late part of X but is paid in the window by every job, late or not: the smallest
# LATE_S loses least. The price is a restamp (capacity.rate, O(1) for the newest grant) for most
# jobs of a busy worker instead of the late ones: about a microsecond each. `emq bench dispatch
# --workload W3 --json`, alternated against 10 ms and a 1.015 s window, compares the two.
# A job sent more than this after its grant's stamp has its grant moved (see
# worker.runtime._reserve_again); grants are stamped up to this before they are made
# (capacity.rate, "Back-dating"): a dispatcher late to a freed grant by less loses nothing.
LATE_S = 0.002
# A send this late after its grant is what emq_quota_grants_moved_total{reason="late_send"}
# counts: several turns of the event loop (a turn is some 7-12 ms on a busy worker), a worker
# short of CPU or of senders. Grants are back-dated by up to LATE_S and a job reaches its
# sender a turn after its grant, so most sends of a healthy worker pass LATE_S and have their
# grant moved: counting those said "starved" of a quiet machine (473 of 605 deliveries).
STARVED_S = 0.1


def grant_window_s(write_margin_s: float) -> float:
    """The window each grant counts for, with a pusher of this write margin (see above)."""
    return 1.0 + LATE_S + write_margin_s


GRANT_WINDOW_S = grant_window_s(Pusher.write_margin_s)  # (the default: aiohttp's)
# The pacing bucket keeps QpsCounter's default (30 ms of the quota's accrual). Beside a busy loop
# the event loop stalls 30-50 ms several times a second and a stall overflows a 30 ms bucket, so
# a larger one would recover part of a stall (W3 --competitor's sustained_min). It is not used:
# the grants a bucket lets out at one instant stay together in the self-clocked log, so a group
# with a 100 ms bucket sends 16 at once every 1.007 s, and a wall-clock second between two such
# bursts holds far less than the quota (134 at 150 QPS). Recovering a stall without that needs the
# overflow paid back paced (a credit drained a little faster than the quota), not at once; and
# beside a busy loop it is the log's lanes that lose, not the bucket (the spare lane's reason).


class GrantLog(QpsCounter):
    """A group's counter in the worker: grants stamped up to LATE_S before they are made."""

    __slots__ = ()
    back_s = LATE_S


class SpareLaneLog(GrantLog):
    """A group's counter with a pusher that writes every request within its grant's window
    (``Pusher.exact_writes``, the lean client): one lane more than the quota (capacity.rate,
    "Spare lane"), so a lane whose job was late no longer costs the group its pace.

    What it spends: the promise's slack of one job per group in any 1000 ms (invariant 2). A
    receiver sees each request at most LATE_S + the write margin after its stamp (the write
    told at once when later, ``PushRequest.written``), so any 1000 ms at the receiver lies in a
    window of the log and holds at most ``qps + burst + 1`` of the group. aiohttp's writes are
    late now and then past its margin (see above), which that slack covers: it keeps GrantLog.
    Measured by `emq bench dispatch --workload W3 --competitor --json` (docs/benchmarks.md)."""

    __slots__ = ()
    spare = 1


class Lifecycle(enum.Enum):
    """Where a group is in its ownership by this worker (see the module docstring)."""

    CLAIMING = "claiming"
    CONTESTED_WAIT = "contested_wait"
    OWNED = "owned"
    RELEASING = "releasing"
    RELEASED = "released"
    DROPPED = "dropped"


class IllegalTransition(RuntimeError):
    """A lifecycle transition the state machine does not have: a bug in the caller."""


_STOPPED = frozenset({Lifecycle.RELEASING, Lifecycle.RELEASED, Lifecycle.DROPPED})
_GONE = frozenset({Lifecycle.RELEASED, Lifecycle.DROPPED})

LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)
# Enqueue to delivery: seconds to hours (a backlog drains at the quota); defined in the core,
# where the API reads the same buckets back (emq.core.latency).
E2E_BUCKETS_S = _E2E_BUCKETS_S


class Buffered:
    """One fetched job waiting for quota (or in flight).

    Its payload is decoded when the job is first looked at (when it is pushed), not when it is
    fetched: a worker holds seconds of quota of every group it owns, and a decoded envelope is
    several objects that each garbage collection walks again while the job waits (a quarter to a
    third of the worker's CPU in ``emq bench dispatch`` W2). Decoded once either way: the push
    reads a :class:`~emq.core.model.Delivery` off the decoded JSON; only a failure (retry, dead
    letter) builds the whole :class:`~emq.core.model.Envelope`.
    """

    __slots__ = (
        "_decoded",
        "_envelope",
        "fetched_at",
        "key",
        "lent_by",
        "offset",
        "payload",
        "progress",
        "queue",
        "reserved_at",
    )

    def __init__(
        self,
        queue: QueueRef,
        offset: Offset,
        payload: bytes,
        fetched_at: float,
        progress: Progress,
    ) -> None:
        self.queue = queue
        self.offset = offset
        self.payload = payload
        self.fetched_at = fetched_at  # monotonic
        self.progress = progress  # its queue's window (no lookup by queue when it finishes)
        self.reserved_at = -1.0  # wall-clock time its quota was reserved at (-1: not reserved)
        self.key: str | None = None  # its job's key, once the dispatcher has read it
        # The sibling group whose budget its grant was lent from (None: its group's own;
        # worker.lending), while reserved.
        self.lent_by: GroupState | None = None
        self._decoded: dict[str, Any] | None = None
        self._envelope: Envelope | None = None

    def _json(self) -> dict[str, Any]:
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = orjson.loads(self.payload)
        return decoded

    def read_key(self) -> str | None:
        """Its job's ``key`` (decodes the payload: the push that follows needs it anyway). An
        unreadable entry has none here: its push fails the same way and dead-letters it."""
        try:
            key = self._json()["job"].get("key")
        except Exception:  # (a try costs nothing until it catches)
            return None
        self.key = key if isinstance(key, str) else None
        return self.key

    def job_dict(self) -> dict[str, Any]:
        """Its job's decoded JSON ({} for an unreadable entry)."""
        try:
            job = self._json()["job"]
        except Exception:
            return {}
        return job if isinstance(job, dict) else {}

    def read_url(self) -> str:
        """Its job's URL ('' for an unreadable entry: it dead-letters on its push)."""
        try:
            return str(self._json()["job"]["url"])
        except Exception:
            return ""

    def job_id(self) -> str:
        """Its job's id ('' for an unreadable entry)."""
        try:
            return str(self._json()["id"])
        except Exception:
            return ""

    def accepted(self) -> tuple[str, int | None, int]:
        """(job id, when it was accepted in epoch ms, failed attempts before this one), read
        at once for a delivery; ('', None, 0) for an unreadable entry."""
        try:
            d = self._json()
            return d["id"], d["t"], d.get("a", 0)
        except Exception:
            return "", None, 0

    @property
    def delivery(self) -> Delivery:
        return Delivery.from_dict(self._json())

    @property
    def envelope(self) -> Envelope:
        envelope = self._envelope
        if envelope is None:
            envelope = self._envelope = Envelope.from_dict(self._json())
        return envelope


class LatencyHistogram:
    """Fixed buckets (ms): cheap to add to, good enough for p50/p99 per interval."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)

    def minus(self, earlier: LatencyHistogram) -> LatencyHistogram:
        out = LatencyHistogram()
        out.counts = [a - b for a, b in zip(self.counts, earlier.counts, strict=True)]
        return out

    def copy(self) -> LatencyHistogram:
        out = LatencyHistogram()
        out.counts = list(self.counts)
        return out

    def add(self, ms: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1  # the first bound >= ms, or over

    def quantile(self, q: float) -> float:
        total = sum(self.counts)
        if total == 0:
            return 0.0
        rank = q * total
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return float(LATENCY_BUCKETS_MS[min(i, len(LATENCY_BUCKETS_MS) - 1)])
        return float(LATENCY_BUCKETS_MS[-1])


@dataclass(slots=True)
class TopicStats:
    """Counters of one topic since the worker took it (readers keep their own snapshots)."""

    delivered: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # Quota grants moved later (capacity.rate restamp): of jobs sent more than LATE_S after
    # their grants' stamps (worker.runtime._reserve_again: a slow loop, senders all busy), and
    # of requests written past their pusher's margin after the look at the grant
    # (worker.runtime._written_late: the CPU taken away right there). Not in version(): read
    # when scraped (emq_quota_grants_moved_total).
    moved_late_send: int = 0
    moved_late_write: int = 0

    def version(self) -> int:
        """Grows with every change (latency is only added with a delivery): equal, unchanged."""
        return self.delivered + self.failed + self.retried + self.dead_lettered


class TopicState:
    """One owned topic: its configuration, its endpoint's in-flight count, its stats."""

    __slots__ = (
        "cut",
        "e2e",
        "e2e_sum_s",
        "endpoint",
        "fences",
        "groups",
        "in_flight",
        "lend_ring",
        "log_class",
        "metrics_version",
        "push_sum_s",
        "rates",
        "slow_at",
        "stats",
        "tenant_share",
        "topic",
        "window_s",
    )

    def __init__(
        self,
        topic: Topic,
        window_s: float = GRANT_WINDOW_S,
        log_class: type[GrantLog] = GrantLog,
    ) -> None:
        self.topic = topic
        self.window_s = window_s  # its groups' pacing window (grant_window_s: the pusher's)
        self.log_class = log_class  # its groups' counters (SpareLaneLog: the pusher's writes exact)
        self.tenant_share: int | None = None  # its share of its tenant's cap (worker.tenant_quota)
        self.endpoint = str(topic.ref)  # the push executor's concurrency-cap key; its rate's name
        self.metrics_version = 0  # stats.version() when the metrics last moved
        self.in_flight = 0
        self.slow_at = -math.inf  # monotonic: a push of it last seen running long (senders.py)
        self.cut = 0  # endpoint slots withheld after pushes that timed out (senders.py)
        self.rates: EndpointRates | None = None  # per-endpoint rates (worker.endpoints), if on
        self.stats = TopicStats()
        self.groups: dict[int, GroupState] = {}
        self.fences: list[Fence] = []  # changes of its group count not yet done (worker.regroup)
        self.lend_ring: list[GroupState] = []  # its groups, for worker.lending's scan
        # For /metrics (cumulative, read at scrape time): successful pushes' total duration;
        # enqueue-to-delivery latency per E2E_BUCKETS_S bucket (last: over) and its total.
        self.push_sum_s = 0.0
        self.e2e = [0] * (len(E2E_BUCKETS_S) + 1)
        self.e2e_sum_s = 0.0

    def delivered_after(self, latency_s: float) -> None:
        """Count one delivery ``latency_s`` after its job was accepted."""
        self.e2e[bisect_left(E2E_BUCKETS_S, latency_s)] += 1
        self.e2e_sum_s += latency_s

    @property
    def ref(self) -> TopicRef:
        return self.topic.ref

    def room(self) -> int:
        """How many more requests this topic's endpoint may have in flight."""
        # (at least one slot: a cut made under a larger endpoint_concurrency must not stop it)
        return max(1, self.topic.endpoint_concurrency - self.cut) - self.in_flight


Buffers = tuple[deque[Buffered], deque[Buffered], deque[Buffered]]


class ByteBudget:
    """The payload bytes a worker holds in its buffers, against ``EMQ_WORKER_BUFFER_BYTES``.

    Counted when a fetch appends jobs and released when the dispatcher takes them (a job in
    flight is bounded by ``max_in_flight`` instead) or when buffers are dropped; a job handed
    back to its buffer is counted again. The fetcher reads less, then nothing but highs, as
    ``used`` nears ``limit`` (see :mod:`worker.fetch`).
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def room(self) -> int:
        return self.limit - self.used


class GroupState:
    """One owned group: three buffers sharing one QPS counter."""

    __slots__ = (
        "_dropped",
        "_stopped",
        "budget",
        "buffers",
        "counter",
        "due",
        "epoch",
        "exhausted",
        "hot",
        "in_flight",
        "keys",
        "lend_from",
        "planner",
        "progress",
        "queued_fetch",
        "ref",
        "scheduled",
        "signals",
        "state",
        "topic",
    )

    def __init__(
        self,
        ref: GroupRef,
        epoch: int,
        topic: TopicState,
        qps: int,
        checkpoints: list[Checkpoint | None],
        budget: ByteBudget | None = None,
    ) -> None:
        self.ref = ref
        self.epoch = epoch
        self.topic = topic
        self.counter: QpsCounter = topic.log_class(
            qps, window_s=topic.window_s, extra=burst_share(topic.topic, ref.index)
        )
        # High, medium and low, made by the first fetch that finds jobs: a worker owning 10 000
        # queues, most of them idle, would otherwise hold 10 000 empty deques (~7 MB).
        self.buffers: Buffers | None = None
        self.progress = {
            q: Progress(c.offset if c else Offset(0, 0))
            for q, c in zip(ref.queues(), checkpoints, strict=True)
        }
        self.exhausted = [False, False, False]  # last fetch found nothing more in the queue
        self.hot = True  # may have work in the store
        # Ready signals (and sweeps) so far: a read sent before the latest one may not mark a
        # queue exhausted, the signal may name a job appended after the read (worker.fetch).
        self.signals = 0
        self.budget = budget if budget is not None else ByteBudget(1 << 62)
        self.queued_fetch = False
        self.scheduled = False  # in the dispatcher's heap
        self.due = 0.0  # monotonic: when the dispatcher serves it (while scheduled)
        self.state = Lifecycle.CLAIMING  # changed only by the transition methods below
        self._stopped = self._dropped = False
        self.in_flight = 0
        self.keys: KeyLines | None = None  # keys in flight (worker.keys), from the first keyed job
        self.lend_from = ref.index  # where worker.lending's next scan of its siblings starts
        self.planner = self._planner(topic.topic)

    # ------------------------------------------------------------------ lifecycle

    # Plain slots behind read-only properties, set only by _move: the hot path reads them per
    # job, and a membership test on an Enum (hashed in Python) would cost a call each time.
    @property
    def stopped(self) -> bool:
        """Being released or gone: no more fetching or dispatching."""
        return self._stopped

    @property
    def dropped(self) -> bool:
        """Released or fenced: no more writes either."""
        return self._dropped

    def _move(self, to: Lifecycle, *legal_from: Lifecycle) -> None:
        if self.state not in legal_from:
            raise IllegalTransition(f"group {self.ref}: {self.state.name} -> {to.name}")
        self.state = to
        self._stopped = to in _STOPPED
        self._dropped = to in _GONE

    def contest(self) -> None:
        """The claim found a former holder that never let go: wait it out before serving."""
        self._move(Lifecycle.CONTESTED_WAIT, Lifecycle.CLAIMING)

    def own(self) -> None:
        """Start serving the group: it may be fetched, dispatched, checkpointed."""
        self._move(Lifecycle.OWNED, Lifecycle.CLAIMING, Lifecycle.CONTESTED_WAIT)

    def release(self) -> None:
        """Hand the group over: stop fetching and dispatching; final writes follow."""
        self._move(Lifecycle.RELEASING, Lifecycle.OWNED)

    def released(self) -> None:
        """Its final writes are done and its hold let go: nothing more is written."""
        self._move(Lifecycle.RELEASED, Lifecycle.RELEASING)

    def abandon(self) -> None:
        """Assigned away before its contested wait ended: never served, nothing written."""
        self._move(Lifecycle.RELEASED, Lifecycle.CONTESTED_WAIT)

    def drop(self) -> None:
        """Fenced by a newer owner: stop at once and write nothing more."""
        self._move(Lifecycle.DROPPED, Lifecycle.OWNED, Lifecycle.RELEASING)

    # ------------------------------------------------------------------ quota

    @staticmethod
    def _planner(topic: Topic) -> WeightedPlanner | None:
        return WeightedPlanner() if topic.priority_mode is PriorityMode.WEIGHTED else None

    def reconfigure(self, qps: int) -> None:
        self.counter.set_qps(qps, burst_share(self.topic.topic, self.ref.index))
        if (self.planner is None) != (self.topic.topic.priority_mode is PriorityMode.STRICT):
            self.planner = self._planner(self.topic.topic)

    def buffered(self) -> int:
        b = self.buffers
        return 0 if b is None else len(b[0]) + len(b[1]) + len(b[2])

    def filling(self) -> Buffers:
        """The buffers, to add fetched jobs to (made now if the group had none)."""
        if self.buffers is None:
            self.buffers = (deque(), deque(), deque())
        return self.buffers

    def fill_target(self, buffer_seconds: float) -> int:
        """How many jobs to hold per priority: about ``buffer_seconds`` of the group's quota."""
        return max(8, int(self.counter.qps * buffer_seconds))

    def oldest_wait_s(self, now: float) -> list[float]:
        return [now - b[0].fetched_at if b else 0.0 for b in self.buffers or ((), (), ())]

    def mark_hot(self) -> None:
        self.hot = True
        self.exhausted = [False, False, False]
        self.signals += 1

    def put_back(self, item: Buffered) -> bool:
        """Return an unsent job to its buffer, in offset order (jobs handed back one after
        another keep their order), counted in the byte budget again; False when the group no
        longer buffers (stopped or dropped: the job is fetched again by whoever owns it)."""
        buffers = self.buffers
        if buffers is None or self.stopped:
            return False
        buffer = buffers[priority_index(item.queue)]
        at = 0
        while at < len(buffer) and buffer[at].offset < item.offset:
            at += 1
        buffer.insert(at, item)
        self.budget.used += len(item.payload)
        item.reserved_at = -1.0  # handed back unsent: still its key's next (keyed_done)
        item.lent_by = None
        return True

    def drop_buffers(self) -> int:
        """Forget every buffered (not in-flight) job; they will be fetched again."""
        n = self.buffered()
        if self.buffers is not None:
            self.budget.used -= sum(len(item.payload) for b in self.buffers for item in b)
        self.buffers = None
        self.keys = None  # its parked jobs go too (still unfinished: fetched again)
        return n

    def queues(self) -> tuple[QueueRef, ...]:
        return tuple(self.progress)


def burst_share(topic: Topic, index: int) -> int:
    """Group ``index``'s part of its topic's ``burst``, split like the quota (they differ by at
    most one and sum to the burst)."""
    base, more = divmod(topic.burst, topic.groups)
    return base + 1 if index < more else base


def priority_index(queue: QueueRef) -> int:
    return PRIORITIES.index(queue.priority)


def now_ms() -> int:
    return int(time.time() * 1000)
