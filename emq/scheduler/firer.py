"""The schedule firer: every due tick of every schedule becomes exactly one job.

Where it runs: inside every ``emq api`` process (``EMQ_SCHEDULER_IN_API``, on by default) and
in any ``emq scheduler`` process. Any number of firers may run at once; none is elected.

One pass (:meth:`Firer.step`)::

    claim due  --(lease)-->  plan ticks  -->  begin (pending: tick, group, job id)
        -->  put the jobs (idempotency key = schedule id + tick)  -->  advance the cursor

Why each tick makes exactly one job, whatever crashes or runs twice:

* The index holds each schedule under its next tick (its *cursor*); claiming moves the entry to
  the end of a lease, so two firers rarely take the same schedule, and a dead firer's claims
  come back when their lease ends.
* ``begin`` is a compare-and-set on the cursor that records the tick as *pending* with the
  group and job id chosen; a firer that finds a tick pending fires that tick again, in the
  recorded group, with the recorded id, before anything else (no policy applies to it).
* The job's idempotency key is the schedule id and the tick's instant; its marker lives with the
  group's queues (one atomic put), so a second put of the same tick is answered as a duplicate.
* ``advance`` moves the cursor past the tick only after the put returned (the job is durable),
  and only if the cursor is still at that tick. A crash in between leaves the tick pending:
  the next firer puts it again (a duplicate, not a second job) and advances.
* Ticks are only passed over by the catch-up policy, and counted as skipped.

Ticks within ``lookahead_s`` are fired ahead, by the same steps: the job is stored as a
delayed job due at the tick (workers move it to its queue within ~0.1 s of the tick), so a
minute on which thousands of schedules tick is stored before it comes.

The firer reads topics through the config store's cache, so a ZooKeeper outage does not stop
it for topics it has seen; Redis unavailable stops a pass, which is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from emq.api.enqueue import encode_envelope, jump_hash
from emq.core.errors import BackendUnavailable, EmqError, NotFound
from emq.core.interfaces import ConfigStore, JobProducer, PutItem
from emq.core.job import Job
from emq.core.jobs import placed_job_id
from emq.core.model import GroupRef, JobLimits, Topic, TopicRef
from emq.core.schedules import (
    Advance,
    Begin,
    Claimed,
    Pending,
    Schedule,
    ScheduleStore,
    Skip,
    next_within,
    plan,
    tick_key,
)
from emq.core.schema.schedules import job_of
from emq.scheduler.settings import SchedulerSettings

log = logging.getLogger(__name__)

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 15, 60, 300, 3600)


def _template(fields: Mapping[str, Any], limits: JobLimits) -> Job:
    """The job of a stored template (validated when stored; the domain checks run again, the
    schema's not: a firer starting with 10 000 schedules due would pay pydantic for each)."""
    try:
        return Job.checked(
            fields["url"], fields.get("method", "POST"), fields.get("headers"),
            fields.get("body"), fields.get("priority", "medium"), fields.get("key"), None, 0.0,
            limits,
        )  # fmt: skip
    except (KeyError, TypeError):  # not a template this version wrote: the schema says why
        return job_of(dict(fields), None, limits)


class SchedulerMetrics:
    """``emq_schedule_*``: ticks fired, late (with the lag), skipped by the catch-up policy."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ("tenant", "topic")
        self.fired = Counter(
            "emq_schedule_ticks_fired", "schedule ticks whose job was stored", labels,
            registry=self.registry,
        )  # fmt: skip
        self.late = Counter(
            "emq_schedule_ticks_late", "ticks fired more than EMQ_SCHEDULER_GRACE_S after "
            "their instant (by the catch-up policy)", labels, registry=self.registry,
        )  # fmt: skip
        self.skipped = Counter(
            "emq_schedule_ticks_skipped", "ticks passed over by the catch-up policy", labels,
            registry=self.registry,
        )  # fmt: skip
        self.lag = Histogram(
            "emq_schedule_lag_seconds", "from a tick's instant to its job stored",
            buckets=LAG_BUCKETS, registry=self.registry,
        )  # fmt: skip

    def record(self, fired: Sequence[tuple[TopicRef, float, bool]]) -> None:
        """Ticks stored: (topic, lag, late) each; the counters moved once per topic."""
        counts: dict[TopicRef, list[int]] = {}
        for topic, lag_s, late in fired:
            n = counts.setdefault(topic, [0, 0])
            n[0] += 1
            n[1] += late
            self.lag.observe(max(lag_s, 0.0))
        for topic, (n_fired, n_late) in counts.items():
            self.fired.labels(topic.tenant, topic.topic).inc(n_fired)
            if n_late:
                self.late.labels(topic.tenant, topic.topic).inc(n_late)

    def skip(self, topic: TopicRef, n: int) -> None:
        if n:
            self.skipped.labels(topic.tenant, topic.topic).inc(n)


@dataclass(frozen=True, slots=True)
class _Work:
    """The ticks one schedule fires in this pass, and where its cursor goes after them."""

    schedule: Schedule
    cursor: int
    ticks: tuple[int, ...]
    skipped: int
    late: int  # the first ``late`` ticks of ``ticks`` are late
    after: int | None
    after_known: bool = True  # False: computed once the last tick's job is stored


@dataclass(frozen=True, slots=True)
class Fired:
    """One tick whose job is stored (what :attr:`Firer.on_fired` hears)."""

    topic: TopicRef
    schedule_id: str
    tick: int
    job_id: str
    lag_s: float
    duplicate: bool


class Firer:
    """Fires the due ticks of every schedule in ``store`` (see the module docstring)."""

    def __init__(
        self,
        store: ScheduleStore,
        config: ConfigStore,
        queues: JobProducer,
        settings: SchedulerSettings | None = None,
        *,
        metrics: SchedulerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        limits: JobLimits | None = None,
        on_fired: Callable[[Fired], None] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.queues = queues
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.clock = clock
        self.limits = limits or JobLimits()
        self.on_fired = on_fired
        self._jobs: dict[tuple[TopicRef, str, float], Job] = {}  # templates parsed once

    # ----------------------------------------------------------------- the loop

    async def run(self, stop: asyncio.Event) -> None:
        """Fire until ``stop`` is set; backend failures wait and retry, never end the loop."""
        pause = self.settings.poll_s
        while not stop.is_set():
            try:
                claimed = await self.step()
                pause = self.settings.poll_s
            except BackendUnavailable as e:
                log.warning("schedule firer: %s; retrying", e.message)
                claimed, pause = 0, min(max(pause * 2, 0.5), 5.0)
            except Exception:
                log.exception("schedule firer: unexpected failure; retrying")
                claimed, pause = 0, 1.0
            if claimed < self.settings.batch:  # a full batch: more may be due at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)

    async def step(self) -> int:
        """One pass: claim what is due and fire it; how many schedules were claimed."""
        now = self.clock()
        horizon = now + self.settings.lookahead_s
        claimed = await self.store.claim_due(horizon, self.settings.lease_s, self.settings.batch)
        if not claimed:
            return 0
        work = [w for w in (self._plan(c, now) for c in claimed) if w is not None]
        await self._skip_all([w for w in work if not w.ticks])
        rounds = max((len(w.ticks) for w in work), default=0)
        for r in range(rounds):  # a catch-up of several ticks: one tick per schedule at a time
            await self._fire_round([w for w in work if len(w.ticks) > r], r)
        return len(claimed)

    # ----------------------------------------------------------------- planning

    def _plan(self, claimed: Claimed, now: float) -> _Work | None:
        s, state = claimed.schedule, claimed.state
        cursor = state.cursor
        if cursor is None or s.paused:
            return None
        if state.pending_tick == cursor:  # a tick begun by a firer that did not finish it
            late = int(now - cursor > self.settings.grace_s)
            return _Work(s, cursor, (cursor,), 0, late, None, after_known=False)
        if now - cursor <= self.settings.grace_s:
            # The usual case: ahead (within the lookahead) or on time, and so is every tick
            # after it; the next one is worked out after this one's job is stored (off the
            # lag), and if it is due already the next pass fires it.
            return _Work(s, cursor, (cursor,), 0, 0, None, after_known=False)
        catch_up = plan(s, cursor, now, self.settings.grace_s)
        return _Work(s, cursor, catch_up.fire, catch_up.skipped, catch_up.late, catch_up.cursor)

    async def _skip_all(self, work: Sequence[_Work]) -> None:
        steps = [Skip(w.schedule.topic, w.schedule.id, w.cursor, w.after, w.skipped) for w in work]
        moved = await self.store.skip(steps)
        for w, ok in zip(work, moved, strict=True):
            if ok:
                self.metrics.skip(w.schedule.topic, w.skipped)
                log.info(
                    "schedule %s/%s: skipped %d late ticks (catch_up=%s)",
                    w.schedule.topic, w.schedule.id, w.skipped, w.schedule.catch_up,
                )  # fmt: skip

    # ----------------------------------------------------------------- firing

    async def _fire_round(self, work: Sequence[_Work], r: int) -> None:
        topics = await self._topics({w.schedule.topic for w in work})
        work = [w for w in work if w.schedule.topic in topics]
        now_ms = int(self.clock() * 1000)
        begins = []
        for w in work:
            tick = w.ticks[r]
            job = self._job(w.schedule, tick)
            group = self._group(job, topics[w.schedule.topic].groups)
            skipped = w.skipped if r == 0 else 0
            cursor = w.cursor if r == 0 else tick  # the previous advance moved it here
            job_id = placed_job_id(now_ms, group, job.priority)
            begins.append(Begin(w.schedule.topic, w.schedule.id, cursor, tick, group, job_id,
                                skipped))  # fmt: skip
        pending = await self.store.begin(begins)
        chosen = [(w, p) for w, p in zip(work, pending, strict=True) if p is not None]
        for w, _ in chosen:
            if r == 0:
                self.metrics.skip(w.schedule.topic, w.skipped)
        items = [self._item(w.schedule, p, topics[w.schedule.topic], now_ms) for w, p in chosen]
        results = await self.queues.put(items)
        done = self.clock()
        advances = []
        stored: list[tuple[TopicRef, float, bool]] = []
        for (w, p), result in zip(chosen, results, strict=True):
            lag = done - p.tick  # negative: fired ahead, stored before the tick came
            late = r < w.late
            if r + 1 < len(w.ticks):
                after = w.ticks[r + 1]
            else:
                after = w.after if w.after_known else next_within(w.schedule, p.tick)
            advances.append(Advance(w.schedule.topic, w.schedule.id, p.tick, result.job_id,
                                    after, done, lag, late))  # fmt: skip
            stored.append((w.schedule.topic, lag, late))
            if self.on_fired is not None:
                fired = Fired(w.schedule.topic, w.schedule.id, p.tick, result.job_id, lag,
                              result.duplicate)  # fmt: skip
                self.on_fired(fired)
        self.metrics.record(stored)
        await self.store.advance(advances)

    async def _topics(self, refs: set[TopicRef]) -> dict[TopicRef, Topic]:
        out = {}
        for ref in refs:
            try:
                out[ref] = await self.config.get_topic(ref)
            except NotFound:
                log.warning("schedules of topic %s: the topic does not exist; not fired", ref)
            except EmqError as e:  # ZooKeeper down and the topic not cached: after the lease
                log.warning("schedules of topic %s: topic unavailable (%s); retrying", ref, e)
        return out

    def _job(self, schedule: Schedule, tick: int) -> Job:
        cache_key = (schedule.topic, schedule.id, schedule.updated_at)
        template = self._jobs.get(cache_key)
        if template is None:
            if len(self._jobs) > 200_000:
                self._jobs.clear()
            template = self._jobs[cache_key] = _template(schedule.job, self.limits)
        return replace(template, idempotency_key=tick_key(schedule.id, tick))

    @staticmethod
    def _group(job: Job, groups: int) -> int:
        if groups == 1:
            return 0
        pin = job.key if job.key is not None else job.idempotency_key
        assert pin is not None
        return jump_hash(pin, groups)

    def _item(self, schedule: Schedule, p: Pending, topic: Topic, now_ms: int) -> PutItem:
        job = self._job(schedule, p.tick)
        queue = GroupRef(topic.ref, min(p.group, topic.groups - 1)).queue(job.priority)
        return PutItem(
            queue=queue,
            job_id=p.job_id,
            payload=encode_envelope(p.job_id, job, now_ms),
            idempotency_key=job.idempotency_key,
            due_ms=p.tick * 1000 if p.tick * 1000 > now_ms else None,  # fired ahead: delayed
        )
