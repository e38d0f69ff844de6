"""Schedules: cron and time zones (DST in two zones), the catch-up policies, and the firer's
exactly-once steps, on the in-memory adapters with a controlled clock."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_schedules import MemoryScheduleStore
from emq.core.errors import InvalidInput
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.schedules import (
    Advance,
    Schedule,
    first_tick,
    parse_cron,
    parse_zone,
    plan,
    ticks_after,
    upcoming,
)
from emq.scheduler.firer import Fired, Firer
from emq.scheduler.settings import SchedulerSettings

REF = TopicRef(Namespace.ONLINE, "acme", "cron")
JOB = {"url": "http://127.0.0.1:9/hook", "method": "POST"}


def local(ts: int, zone: str) -> str:
    return datetime.fromtimestamp(ts, ZoneInfo(zone)).isoformat()


def at(text: str, zone: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def schedule(cron: str, zone: str = "UTC", **kw: object) -> Schedule:
    return Schedule(REF, "s1", parse_cron(cron), zone, JOB, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("* * * *", "5 fields"),
        ("61 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * * 13 *", "month"),
        ("* * * * * * *", "5 fields"),
        ("0 0 31 2 *", "day-of-month"),
        ("", "cron expression"),
    ],
)
def test_invalid_cron_names_the_field(cron: str, why: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_cron(cron)
    assert e.value.field == "cron" and why in str(e.value)


def test_timezones_are_iana_names() -> None:
    assert parse_zone("Europe/Paris").key == "Europe/Paris"
    for bad in ("Mars/Olympus", "../etc/passwd", "", "Europe/"):
        with pytest.raises(InvalidInput) as e:
            parse_zone(bad)
        assert e.value.field == "timezone"


def test_seconds_field_leads() -> None:
    ticks = list(ticks_after("*/15 * * * * *", ZoneInfo("UTC"), 1_800_000_000, 3))
    assert ticks == [1_800_000_015, 1_800_000_030, 1_800_000_045]


# --------------------------------------------------------------------------- daylight saving


@pytest.mark.parametrize(
    ("zone", "day_before", "fired"),
    [
        # 02:30 does not exist on the day the clocks jump to 03:00: it fires once, at 03:00
        ("America/New_York", "2026-03-07", "2026-03-08T03:00:00-04:00"),
        ("Europe/Paris", "2026-03-28", "2026-03-29T03:00:00+02:00"),
    ],
)
def test_a_missing_local_time_fires_once_at_the_next_valid_instant(
    zone: str, day_before: str, fired: str
) -> None:
    ticks = list(ticks_after("30 2 * * *", ZoneInfo(zone), at(day_before + "T12:00", zone), 2))
    assert local(ticks[0], zone) == fired
    assert ticks[1] - ticks[0] == 86400 - 1800  # the next day's 02:30 as usual


@pytest.mark.parametrize(
    ("zone", "start", "ticks"),
    [
        (  # every 20 minutes across the gap: 02:00, 02:20, 02:40 are one tick at 03:00
            "America/New_York",
            "2026-03-08T01:30",
            ["01:40:00-05:00", "03:00:00-04:00", "03:20:00-04:00"],
        ),
        (
            "Europe/Paris",
            "2026-03-29T01:30",
            ["01:40:00+01:00", "03:00:00+02:00", "03:20:00+02:00"],
        ),
    ],
)
def test_ticks_inside_a_gap_collapse_into_one(zone: str, start: str, ticks: list[str]) -> None:
    got = list(ticks_after("*/20 * * * *", ZoneInfo(zone), at(start, zone), 3))
    assert [local(t, zone)[11:] for t in got] == ticks


@pytest.mark.parametrize(
    ("zone", "cron", "start", "ticks"),
    [
        # 01:30 happens twice on the night the clocks go back from 02:00 to 01:00: once fired
        (
            "America/New_York",
            "30 1 * * *",
            "2026-10-31T12:00",
            ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        ),
        (
            "Europe/Paris",
            "30 2 * * *",
            "2026-10-24T12:00",
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        ),
        # an hourly schedule fires once for the repeated hour (its first pass)
        (
            "Europe/Paris",
            "0 * * * *",
            "2026-10-25T01:30",
            ["2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"],
        ),
    ],
)
def test_a_repeated_local_time_fires_once(
    zone: str, cron: str, start: str, ticks: list[str]
) -> None:
    got = list(ticks_after(cron, ZoneInfo(zone), at(start, zone), 2))
    assert [local(t, zone) for t in got] == ticks


def test_ticks_from_inside_the_repeated_hour_do_not_go_back() -> None:
    zone = ZoneInfo("America/New_York")
    second_pass = datetime(2026, 11, 1, 1, 10, tzinfo=zone, fold=1).timestamp()
    got = list(ticks_after("*/20 * * * *", zone, second_pass, 2))
    assert [local(t, "America/New_York") for t in got] == [
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T02:20:00-05:00",
    ]


# --------------------------------------------------------------------------- windows, catch-up


def test_start_and_end_bound_the_ticks() -> None:
    s = schedule("0 * * * *", start_at=7200.0, end_at=3 * 3600.0)
    assert first_tick(s, 0) == 7200
    assert upcoming(s, 0, 5) == [7200, 10800]
    assert first_tick(s, 10800) is None


@pytest.mark.parametrize(
    ("policy", "fire", "skipped"),
    [("skip", (), 4), ("latest", (240,), 3), ("all", (120, 180, 240), 1)],
)
def test_catch_up_policies_after_an_outage(
    policy: str, fire: tuple[int, ...], skipped: int
) -> None:
    s = schedule("* * * * *", catch_up=policy, catch_up_max=3)
    # ticks at 60..240 are all overdue at 290 (grace 30 s): late
    got = plan(s, 60, 290, grace_s=30)
    assert (got.fire, got.skipped, got.cursor) == (fire, skipped, 300)


def test_on_time_ticks_always_fire() -> None:
    s = schedule("* * * * *", catch_up="skip")
    got = plan(s, 60, 250, grace_s=30)  # 240 is 10 s old: on time; 60..180 are late
    assert (got.fire, got.skipped, got.late) == ((240,), 3, 0)


# --------------------------------------------------------------------------- the firer


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _rig(
    now: float,
) -> tuple[Clock, MemoryScheduleStore, MemoryConfigStore, MemoryQueueBackend]:
    clock = Clock(now)
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "Acme", "x", 0.0))
    await config.create_topic(Topic(REF, 100, 3, secret="whsec_x"))
    return clock, MemoryScheduleStore(), config, MemoryQueueBackend(clock=clock)


def _firer(store, config, queues, clock, fired, **kw) -> Firer:  # type: ignore[no-untyped-def]
    settings = SchedulerSettings(**{"grace_s": 30, "lookahead_s": 0, **kw})
    return Firer(store, config, queues, settings, clock=clock, on_fired=fired.append)


async def _stored(queues: MemoryQueueBackend) -> int:
    topic = Topic(REF, 100, 3, secret="whsec_x")
    return sum(await queues.backlog([q for g in topic.group_refs() for q in g.queues()]))


async def test_two_firers_fire_each_tick_once() -> None:
    clock, store, config, queues = await _rig(1000.0)
    s = schedule("* * * * *")
    await store.create(s, first_tick(s, clock.now))
    fired: list[Fired] = []
    a, b = _firer(store, config, queues, clock, fired), _firer(store, config, queues, clock, fired)
    for now in (1020.0, 1080.5, 1081.0, 1140.2):
        clock.now = now
        await a.step()
        await b.step()
    assert [f.tick for f in fired] == [1020, 1080, 1140]
    assert await _stored(queues) == 3
    _, state = await store.get(REF, "s1")
    assert (state.fired, state.last_tick, state.cursor) == (3, 1140, 1200)


class CrashAfterPut(MemoryScheduleStore):
    """A firer that dies between storing a tick's job and moving the cursor."""

    crash = True

    async def advance(self, steps: list[Advance]) -> list[bool]:  # type: ignore[override]
        if self.crash:
            self.crash = False
            raise RuntimeError("killed")
        return await super().advance(steps)


async def test_a_crash_between_put_and_advance_neither_skips_nor_repeats() -> None:
    clock, _, config, queues = await _rig(1000.0)
    store = CrashAfterPut()
    s = schedule("* * * * *")
    await store.create(s, first_tick(s, clock.now))
    fired: list[Fired] = []
    clock.now = 1020.0
    with pytest.raises(RuntimeError):
        await _firer(store, config, queues, clock, fired).step()
    _, state = await store.get(REF, "s1")
    assert state.pending_tick == 1020 and state.cursor == 1020
    # the next firer, once the lease is over: the pending tick first, whatever the policy
    clock.now = 1020.0 + SchedulerSettings().lease_s + 1
    await _firer(store, config, queues, clock, fired).step()
    assert [(f.tick, f.duplicate) for f in fired] == [(1020, False), (1020, True)]
    assert fired[0].job_id == fired[1].job_id
    assert await _stored(queues) == 1
    _, state = await store.get(REF, "s1")
    assert (state.fired, state.pending_tick, state.cursor) == (1, None, 1080)


@pytest.mark.parametrize(("policy", "ticks"), [("latest", [1140]), ("all", [1020, 1080, 1140])])
async def test_an_outage_is_caught_up_by_policy(policy: str, ticks: list[int]) -> None:
    clock, store, config, queues = await _rig(1000.0)
    s = schedule("* * * * *", catch_up=policy)
    await store.create(s, first_tick(s, clock.now))
    fired: list[Fired] = []
    clock.now = 1000.0 + 180  # three minutes later, the first firer
    firer = _firer(store, config, queues, clock, fired)
    await firer.step()
    assert [f.tick for f in fired] == ticks
    _, state = await store.get(REF, "s1")
    assert state.skipped == 3 - len(ticks) and state.cursor == 1200
    sample = firer.metrics.registry.get_sample_value
    labels = {"tenant": "acme", "topic": "cron"}
    assert sample("emq_schedule_ticks_fired_total", labels) == len(ticks)
    assert sample("emq_schedule_ticks_late_total", labels) == len(ticks)  # all over 30 s old
    assert (sample("emq_schedule_ticks_skipped_total", labels) or 0) == 3 - len(ticks)
    assert sample("emq_schedule_lag_seconds_sum") == sum(1180 - t for t in ticks)


async def test_paused_schedules_are_not_due() -> None:
    clock, store, config, queues = await _rig(1000.0)
    s = schedule("* * * * *", paused=True)
    await store.create(s, None)
    clock.now = 5000.0
    fired: list[Fired] = []
    assert await _firer(store, config, queues, clock, fired).step() == 0
    assert fired == [] and await store.next_due() is None


async def test_ticks_within_the_lookahead_are_stored_ahead_as_delayed_jobs() -> None:
    clock, store, config, queues = await _rig(1000.0)
    s = schedule("* * * * *")
    await store.create(s, first_tick(s, clock.now))
    fired: list[Fired] = []
    firer = _firer(store, config, queues, clock, fired, lookahead_s=5)
    clock.now = 1014.0  # 1020 is 6 s away: not yet
    await firer.step()
    assert fired == []
    clock.now = 1016.0  # 4 s away: stored now, due at the tick
    await firer.step()
    assert [(f.tick, f.lag_s) for f in fired] == [(1020, -4.0)]  # stored 4 s ahead
    topic = Topic(REF, 100, 3, secret="whsec_x")
    assert sum(await queues.delayed(topic.group_refs())) == 1 and await _stored(queues) == 0
    _, state = await store.get(REF, "s1")
    assert (state.last_tick, state.cursor) == (1020, 1080)
