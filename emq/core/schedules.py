"""Schedules: a job template fired on a cron expression in a time zone (issue 28, section 2).

A topic has schedules. Each one is ``{id, cron, timezone, job, start_at?, end_at?, catch_up,
catch_up_max, paused}``; every *tick* (an instant the cron expression names in the time zone)
becomes one ordinary job of the topic, whose idempotency key is the schedule's id and the
tick's instant (:func:`tick_key`).

Cron expressions are parsed and iterated by cronsim (Debian cron's syntax: 5 fields, or 6 with a
leading seconds field; ``L``, ``W``, ``#`` and names of days and months). cronsim walks *local
wall-clock times*; :func:`instant` turns each into the instant it fires at, which is where the
daylight-saving rules live:

* a local time that does not exist (the clocks jump from 02:00 to 03:00) fires once, at the
  first instant after the gap (03:00 new time); several ticks inside one gap are that one tick;
* a local time that occurs twice (the clocks go back from 02:00 to 01:00) fires once, at its
  first occurrence; the repeated hour's ticks are not fired again.

Every tick is therefore a distinct, increasing instant, and a schedule fires at most once per
local wall-clock time.

The catch-up policy decides what a firer that finds ticks overdue does with them (a firer down,
a backend outage). A tick is *late* when it is found more than ``grace_s`` after its instant:

* ``skip``: late ticks are skipped (counted), on-time ones fire;
* ``latest``: on-time ticks fire; if there are none, the latest late tick fires; the rest are
  skipped;
* ``all``: every tick fires, oldest first, but at most ``catch_up_max`` late ones (the newest);
  the older ones are skipped.
"""

from __future__ import annotations

import abc
import functools
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from emq.core.errors import InvalidInput
from emq.core.model import TopicRef

CATCH_UP_POLICIES = ("skip", "latest", "all")
DEFAULT_CATCH_UP = "latest"
DEFAULT_CATCH_UP_MAX = 10
MAX_CATCH_UP = 1000  # the bound on ticks one catch-up fires for one schedule
MAX_SCHEDULES_PER_TOPIC = 1000
MAX_CRON_CHARS = 200
MAX_NEXT = 100  # ticks ``GET .../schedules/{id}?next=N`` lists at most
COUNT_CAP = 100_000  # late ticks a catch-up counts before it stops counting (it says "at least")
SCHEDULE_ID_PREFIX = "sch_"
TICK_KEY_PREFIX = "emq-schedule:"

_UTC = UTC


# --------------------------------------------------------------------------- parsing


def parse_cron(expr: str) -> str:
    """``expr`` checked and normalised (single spaces); ``InvalidInput`` naming ``cron``."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidInput("cron", "must be a cron expression such as '*/5 * * * *'")
    if len(expr) > MAX_CRON_CHARS:
        raise InvalidInput("cron", f"at most {MAX_CRON_CHARS} characters")
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise InvalidInput(
            "cron",
            f"must have 5 fields (minute hour day-of-month month day-of-week) or 6 (a leading "
            f"seconds field), got {len(parts)}",
        )
    normal = " ".join(parts)
    try:
        CronSim(normal, datetime(2000, 1, 1))
    except CronSimError as e:
        raise InvalidInput("cron", f"{normal!r}: {e}") from None
    except (ValueError, IndexError) as e:  # cronsim's own checks miss a few shapes
        raise InvalidInput("cron", f"{normal!r}: {e}") from None
    return normal


def parse_zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Paris``, ``UTC``); ``InvalidInput`` naming
    ``timezone``."""
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith(("/", ".")):
        raise InvalidInput("timezone", f"must be an IANA time zone such as 'Europe/Paris', "
                                       f"got {name!r}")  # fmt: skip
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput("timezone", f"unknown IANA time zone {name!r}") from None


def new_schedule_id() -> str:
    return SCHEDULE_ID_PREFIX + secrets.token_hex(8)


def tick_key(schedule_id: str, tick: int) -> str:
    """The idempotency key of a tick's job: the same for every firer that fires it."""
    return f"{TICK_KEY_PREFIX}{schedule_id}:{tick}"


# --------------------------------------------------------------------------- ticks


def instant(local: datetime, zone: ZoneInfo) -> int:
    """The epoch second a naive local wall-clock time fires at (module docstring: the first
    occurrence of a repeated time; the end of the gap for a time that does not exist)."""
    first = local.replace(tzinfo=zone, fold=0)
    epoch = int(first.timestamp())
    back = datetime.fromtimestamp(epoch, zone).replace(tzinfo=None)
    if back == local:
        return epoch
    return _gap_end(local, zone)


def _gap_end(local: datetime, zone: ZoneInfo) -> int:
    """The first instant whose local time is after ``local`` (which lies in a gap)."""
    lo = int(local.replace(tzinfo=zone, fold=1).timestamp())  # before the jump: local < gap
    hi = int(local.replace(tzinfo=zone, fold=0).timestamp())  # after it
    lo, hi = min(lo, hi), max(lo, hi)
    while hi - lo > 1:  # a jump is at most a few hours: ~14 steps
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) > local:
            hi = mid
        else:
            lo = mid
    return hi


def _local(epoch: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(int(epoch), zone).replace(tzinfo=None)


def _fold_shift(epoch: float, zone: ZoneInfo) -> timedelta:
    """How far a local time in the second pass of a repeated hour lies behind the first."""
    now = datetime.fromtimestamp(int(epoch), zone)
    if not now.fold:
        return timedelta(0)
    first = now.replace(fold=0).utcoffset() or timedelta(0)
    second = now.utcoffset() or timedelta(0)
    return max(first - second, timedelta(0))


def ticks_after(cron: str, zone: ZoneInfo, after: float, limit: int) -> Iterator[int]:
    """Up to ``limit`` ticks strictly after epoch ``after``, in increasing order."""
    start = _local(after, zone) - timedelta(seconds=1)
    found = 0
    last = after
    for local in CronSim(cron, start):
        at = instant(local, zone)
        if at <= last:  # before ``after`` (the second pass of a repeated hour), or one gap's
            continue
        yield at
        last = at
        found += 1
        if found >= limit:
            return


def ticks_before(cron: str, zone: ZoneInfo, until: float, since: float) -> Iterator[int]:
    """Ticks at or before ``until`` and at or after ``since``, newest first."""
    start = _local(until, zone) + _fold_shift(until, zone) + timedelta(seconds=1)
    last: int | None = None
    for local in CronSim(cron, start, reverse=True):
        at = instant(local, zone)
        if at > until or at == last:
            continue
        if at < since:
            return
        yield at
        last = at


def first_tick(schedule: Schedule, now: float) -> int | None:
    """The first tick a new (or resumed, or changed) schedule fires: after ``now``, at or
    after ``start_at``, at or before ``end_at``; ``None`` when there is none."""
    after = max(now, schedule.start_at - 0.5) if schedule.start_at is not None else now
    return next_within(schedule, after)


def next_within(schedule: Schedule, after: float) -> int | None:
    """The tick after ``after`` unless it lies past ``end_at`` (or none in 50 years)."""
    at = _next_tick(schedule.cron, schedule.timezone, int(after) if after == int(after) else after)
    if at is None or (schedule.end_at is not None and at > schedule.end_at):
        return None
    return at


@functools.lru_cache(maxsize=8192)
def _next_tick(cron: str, timezone: str, after: float) -> int | None:
    """The tick after ``after``: schedules that share an expression and a zone (most do: every
    minute, every hour) share the work of their firers, which parsing each time would repeat."""
    return next(ticks_after(cron, parse_zone(timezone), after, 1), None)


def upcoming(schedule: Schedule, after: float, count: int) -> list[int]:
    """The next ``count`` ticks after ``after`` within the schedule's window."""
    if schedule.start_at is not None:
        after = max(after, schedule.start_at - 0.5)
    out = []
    for at in ticks_after(schedule.cron, schedule.zone, after, count):
        if schedule.end_at is not None and at > schedule.end_at:
            break
        out.append(at)
    return out


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What a firer does with a schedule whose cursor is due: the ticks to fire (oldest first),
    how many it skips by the policy, and the cursor after the last of them."""

    fire: tuple[int, ...]
    skipped: int
    late: int  # of ``fire``, how many are late
    cursor: int | None  # the next tick to fire after these (None: the schedule has ended)


def plan(schedule: Schedule, cursor: int, now: float, grace_s: float) -> CatchUp:
    """The catch-up of a schedule whose next tick ``cursor`` is at or before ``now``."""
    on_time: list[int] = []
    late: list[int] = []
    wanted = {"skip": 0, "latest": 1, "all": schedule.catch_up_max}[schedule.catch_up]
    counted = 0
    for at in ticks_before(schedule.cron, schedule.zone, now, cursor):
        if schedule.end_at is not None and at > schedule.end_at:
            continue
        if now - at <= grace_s:
            on_time.append(at)
        elif len(late) < wanted:
            late.append(at)
        else:
            counted += 1
            if counted >= COUNT_CAP:
                break
    if schedule.catch_up == "latest" and on_time:
        counted += len(late)
        late = []
    fire = tuple(sorted(on_time + late))
    cursor_after = next_within(schedule, max(now, fire[-1] if fire else now))
    return CatchUp(fire, counted, len(late), cursor_after)


# --------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True)
class Schedule:
    """One schedule of a topic; ``job`` is the job template as validated (url, method, headers,
    body, priority, key)."""

    topic: TopicRef
    id: str
    cron: str
    timezone: str
    job: Mapping[str, Any]
    start_at: float | None = None
    end_at: float | None = None
    catch_up: str = DEFAULT_CATCH_UP
    catch_up_max: int = DEFAULT_CATCH_UP_MAX
    paused: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    zone: ZoneInfo = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", parse_zone(self.timezone))
        if self.catch_up not in CATCH_UP_POLICIES:
            raise InvalidInput("catch_up", f"must be one of {', '.join(CATCH_UP_POLICIES)}")
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise InvalidInput("end_at", "must not be before start_at")

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.topic.namespace.value,
            "tenant": self.topic.tenant,
            "topic": self.topic.topic,
            "id": self.id,
            "cron": self.cron,
            "timezone": self.timezone,
            "job": dict(self.job),
            "start_at": self.start_at,
            "end_at": self.end_at,
            "catch_up": self.catch_up,
            "catch_up_max": self.catch_up_max,
            "paused": self.paused,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, topic: TopicRef, raw: Mapping[str, Any]) -> Schedule:
        return cls(
            topic,
            raw["id"],
            raw["cron"],
            raw["timezone"],
            raw["job"],
            raw.get("start_at"),
            raw.get("end_at"),
            raw.get("catch_up", DEFAULT_CATCH_UP),
            int(raw.get("catch_up_max", DEFAULT_CATCH_UP_MAX)),
            bool(raw.get("paused", False)),
            float(raw.get("created_at", 0.0)),
            float(raw.get("updated_at", 0.0)),
        )

    def changed(self, **changes: Any) -> Schedule:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the firers wrote: the cursor (next tick to fire, ``None`` when paused or ended),
    the tick being fired (``pending``: its group and job id, kept so that whoever fires it
    again puts the same job in the same group), the last tick fired and the counters."""

    cursor: int | None = None
    pending_tick: int | None = None
    pending_group: int | None = None
    pending_job: str | None = None
    last_tick: int | None = None
    last_job: str | None = None
    last_fired_at: float | None = None
    last_lag_s: float | None = None
    fired: int = 0
    skipped: int = 0
    late: int = 0


@dataclass(frozen=True, slots=True)
class Claimed:
    """A due schedule a firer claimed (for the store's lease)."""

    schedule: Schedule
    state: ScheduleState


@dataclass(frozen=True, slots=True)
class Begin:
    """Fire ``tick`` of a schedule whose cursor is ``cursor``: record it as pending with this
    group and job id, unless that tick is pending already (then its record is kept)."""

    topic: TopicRef
    schedule_id: str
    cursor: int
    tick: int
    group: int
    job_id: str
    skipped: int = 0  # ticks the policy skipped before this one


@dataclass(frozen=True, slots=True)
class Pending:
    tick: int
    group: int
    job_id: str


@dataclass(frozen=True, slots=True)
class Advance:
    """The job of pending ``tick`` is stored (as ``job_id``): move the cursor to ``cursor``
    (``None``: the schedule has ended), if the cursor is still at ``tick``."""

    topic: TopicRef
    schedule_id: str
    tick: int
    job_id: str
    cursor: int | None
    fired_at: float
    lag_s: float
    late: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    """The policy skipped every due tick (``skipped`` of them): move the cursor from ``cursor``
    to ``to`` (``None``: the schedule has ended), if it is still at ``cursor``."""

    topic: TopicRef
    schedule_id: str
    cursor: int
    to: int | None
    skipped: int


class ScheduleStore(abc.ABC):
    """Where schedules, their cursors and the due index live.

    The due index holds each active schedule under the instant of its next tick, so a firer
    finds what is due without reading the others; :meth:`claim_due` leases what it returns
    (another firer skips it until the lease ends), and every step of a tick is a
    compare-and-set on the cursor, so two firers at once never move it twice.
    """

    @abc.abstractmethod
    async def create(self, schedule: Schedule, cursor: int | None) -> None:
        """Store a new schedule (``AlreadyExists``; ``InvalidInput`` past the topic's limit)."""

    @abc.abstractmethod
    async def get(self, topic: TopicRef, schedule_id: str) -> tuple[Schedule, ScheduleState]:
        """One schedule and its state (``NotFound``)."""

    @abc.abstractmethod
    async def of_topic(self, topic: TopicRef) -> list[tuple[Schedule, ScheduleState]]:
        """A topic's schedules, by id."""

    @abc.abstractmethod
    async def replace(self, schedule: Schedule, cursor: int | None) -> ScheduleState:
        """Store a changed schedule and its new cursor (``None``: paused or ended); a tick
        pending meanwhile is dropped (``NotFound`` if it was deleted)."""

    @abc.abstractmethod
    async def delete(self, topic: TopicRef, schedule_id: str) -> None:
        """Remove a schedule (``NotFound``)."""

    @abc.abstractmethod
    async def claim_due(self, now: float, lease_s: float, limit: int) -> list[Claimed]:
        """Up to ``limit`` schedules whose cursor is at or before ``now``, leased for
        ``lease_s`` (their index entry moves to ``now + lease_s``)."""

    @abc.abstractmethod
    async def begin(self, steps: Sequence[Begin]) -> list[Pending | None]:
        """For each step, the pending tick to put (``None``: the cursor moved, skip it)."""

    @abc.abstractmethod
    async def advance(self, steps: Sequence[Advance]) -> list[bool]:
        """For each step, whether the cursor moved (``False``: someone else moved it)."""

    @abc.abstractmethod
    async def skip(self, steps: Sequence[Skip]) -> list[bool]:
        """For each step, whether the cursor moved past the skipped ticks."""

    @abc.abstractmethod
    async def next_due(self) -> float | None:
        """The earliest instant in the due index (``None`` when it is empty)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the store's connections."""
