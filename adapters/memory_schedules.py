"""Schedules in memory (:class:`~emq.core.schedules.ScheduleStore`): unit tests and
single-process use. The same steps as :mod:`adapters.redis_schedules`, each one atomic because
nothing awaits inside it."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace

from emq.core.errors import AlreadyExists, InvalidInput, NotFound
from emq.core.model import TopicRef
from emq.core.schedules import (
    MAX_SCHEDULES_PER_TOPIC,
    Advance,
    Begin,
    Claimed,
    Pending,
    Schedule,
    ScheduleState,
    ScheduleStore,
    Skip,
)

_Key = tuple[TopicRef, str]


class MemoryScheduleStore(ScheduleStore):
    def __init__(self) -> None:
        self._defs: dict[_Key, Schedule] = {}
        self._states: dict[_Key, ScheduleState] = {}
        self._due: dict[_Key, float] = {}

    async def create(self, schedule: Schedule, cursor: int | None) -> None:
        key = (schedule.topic, schedule.id)
        if key in self._defs:
            raise AlreadyExists(f"schedule {schedule.id!r} already exists in topic {key[0]}")
        if sum(1 for t, _ in self._defs if t == schedule.topic) >= MAX_SCHEDULES_PER_TOPIC:
            raise InvalidInput("id", f"topic {key[0]} has {MAX_SCHEDULES_PER_TOPIC} schedules")
        self._defs[key] = schedule
        self._states[key] = ScheduleState(cursor=cursor)
        self._index(key, cursor)

    def _index(self, key: _Key, cursor: int | None) -> None:
        if cursor is None:
            self._due.pop(key, None)
        else:
            self._due[key] = float(cursor)

    async def get(self, topic: TopicRef, schedule_id: str) -> tuple[Schedule, ScheduleState]:
        key = (topic, schedule_id)
        if key not in self._defs:
            raise NotFound(f"no schedule {schedule_id!r} in topic {topic}")
        return self._defs[key], self._states[key]

    async def of_topic(self, topic: TopicRef) -> list[tuple[Schedule, ScheduleState]]:
        keys = sorted(k for k in self._defs if k[0] == topic)
        return [(self._defs[k], self._states[k]) for k in keys]

    async def replace(self, schedule: Schedule, cursor: int | None) -> ScheduleState:
        key = (schedule.topic, schedule.id)
        if key not in self._defs:
            raise NotFound(f"no schedule {schedule.id!r} in topic {key[0]}")
        self._defs[key] = schedule
        state = replace(
            self._states[key],
            cursor=cursor,
            pending_tick=None,
            pending_group=None,
            pending_job=None,
        )
        self._states[key] = state
        self._index(key, cursor)
        return state

    async def delete(self, topic: TopicRef, schedule_id: str) -> None:
        key = (topic, schedule_id)
        if self._defs.pop(key, None) is None:
            raise NotFound(f"no schedule {schedule_id!r} in topic {topic}")
        self._states.pop(key, None)
        self._due.pop(key, None)

    async def claim_due(self, now: float, lease_s: float, limit: int) -> list[Claimed]:
        due = heapq.nsmallest(limit, ((at, k) for k, at in self._due.items() if at <= now))
        out = []
        for _, key in due:
            self._due[key] = now + lease_s
            out.append(Claimed(self._defs[key], self._states[key]))
        return out

    async def begin(self, steps: Sequence[Begin]) -> list[Pending | None]:
        return [self._begin(s) for s in steps]

    def _begin(self, s: Begin) -> Pending | None:
        key = (s.topic, s.schedule_id)
        state = self._states.get(key)
        if state is None or state.cursor != s.cursor:
            return None
        if state.pending_tick == s.tick:
            assert state.pending_group is not None and state.pending_job is not None
            return Pending(s.tick, state.pending_group, state.pending_job)
        self._states[key] = replace(
            state,
            cursor=s.tick,
            pending_tick=s.tick,
            pending_group=s.group,
            pending_job=s.job_id,
            skipped=state.skipped + s.skipped,
        )
        return Pending(s.tick, s.group, s.job_id)

    async def advance(self, steps: Sequence[Advance]) -> list[bool]:
        return [self._advance(s) for s in steps]

    def _advance(self, s: Advance) -> bool:
        key = (s.topic, s.schedule_id)
        state = self._states.get(key)
        if state is None or state.cursor != s.tick:
            return False
        self._states[key] = ScheduleState(
            cursor=s.cursor,
            last_tick=s.tick,
            last_job=s.job_id,
            last_fired_at=s.fired_at,
            last_lag_s=s.lag_s,
            fired=state.fired + 1,
            skipped=state.skipped,
            late=state.late + int(s.late),
        )
        self._index(key, s.cursor)
        return True

    async def skip(self, steps: Sequence[Skip]) -> list[bool]:
        return [self._skip(s) for s in steps]

    def _skip(self, s: Skip) -> bool:
        key = (s.topic, s.schedule_id)
        state = self._states.get(key)
        if state is None or state.cursor != s.cursor or state.pending_tick is not None:
            return False
        self._states[key] = replace(state, cursor=s.to, skipped=state.skipped + s.skipped)
        self._index(key, s.to)
        return True

    async def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    async def aclose(self) -> None:
        return None
