"""The grid every paced group shares (worker.ticks): groups due in the same tick are served by
one wake-up of the dispatcher, and none is looked at before its counter can grant."""

from __future__ import annotations

import asyncio
import time

from capacity.rate import QpsCounter
from worker.dispatch import Dispatcher
from worker.ticks import EARLY_S, on_grid


def test_a_time_goes_to_the_next_grid_point_at_least_early_s_after_it() -> None:
    assert on_grid(10.0002, 0.005) == 10.005
    assert on_grid(10.0041, 0.005) == 10.01  # (10.005 is less than EARLY_S after it)
    for at in (0.0, 1.23456, 99.9999, 12345.678901):
        point = on_grid(at, 0.005)
        assert at + EARLY_S <= point < at + EARLY_S + 0.005 + 1e-9
        assert abs(point / 0.005 - round(point / 0.005)) < 1e-6  # a multiple of the tick
    assert on_grid(3.0, 0) == 3.0 + EARLY_S


def test_paced_groups_due_at_scattered_times_share_a_few_grid_points() -> None:
    """A hundred counters at 100 QPS, each free at its own moment: their next looks fall on at
    most one point per tick, and each is at or after the moment its counter can grant."""
    tick = 0.005
    now = 1000.0
    points = set()
    for i in range(100):
        counter = QpsCounter(100)
        counter.reserve(1000, now)  # its burst taken: the next grant waits for a token
        wall = now + i * 0.000137  # each looks at its counter at its own moment
        free_at = wall + counter.wait_s(wall)
        point = on_grid(free_at, tick)
        assert point - EARLY_S >= free_at  # never looked at before it can grant
        points.add(round(point / tick))
    assert len(points) <= 4  # 100 groups, at most four wake-ups (they spread over 14 ms)


async def test_the_dispatcher_serves_every_group_due_in_a_tick_in_one_wake_up() -> None:
    """Groups woken for scattered times inside one tick's grid point are all taken by the one
    dispatch that runs when the loop wakes (even if its timer fires a little early)."""
    from types import SimpleNamespace

    served: list[int] = []
    dispatcher = Dispatcher(lambda g, item: None, tick_s=0.005)

    def group(n: int) -> SimpleNamespace:
        g = SimpleNamespace(stopped=False, scheduled=False, due=0.0, n=n)
        g.topic = SimpleNamespace(topic=SimpleNamespace(paused=False))
        return g

    point = on_grid(time.monotonic(), 0.005)
    groups = [group(n) for n in range(20)]
    for g in groups:
        dispatcher.wake(g, point)  # (what _delay gives every group due inside that tick)

    def serve(g: SimpleNamespace, budget: int, wall: float, mono: float) -> int:
        served.append(g.n)
        return 1

    dispatcher._serve = serve  # type: ignore[method-assign]
    wakes = 0
    while len(served) < len(groups):
        await dispatcher.pause()
        wakes += 1
        dispatcher.dispatch(1000, time.time(), time.monotonic())
        assert wakes <= 2  # one wake-up (two if the machine ran the loop before the point)
    assert sorted(served) == list(range(20))
    assert time.monotonic() >= point - EARLY_S
    await asyncio.sleep(0)


def test_a_backlogged_group_served_on_the_grid_keeps_its_pace_and_its_quota() -> None:
    """A backlogged group looked at only on the grid's points (as Dispatcher._delay now asks):
    no sliding second holds more than its quota, and the back-dating of its grants
    (worker.groups.LATE_S) keeps its sustained rate within a hair of the exact schedule's."""
    from worker.groups import GRANT_WINDOW_S, GrantLog

    def serve(grid_s: float) -> list[float]:
        counter = GrantLog(150, window_s=GRANT_WINDOW_S)
        sends: list[float] = []
        t = 1_700_000_000.0
        while t < 1_700_000_030.0:
            sends += [t] * counter.reserve(10_000, t)
            wait = max(0.0005, counter.wait_s(t))
            t = on_grid(t + wait, grid_s) if grid_s else t + wait
        return sends

    exact, gridded = serve(0.0), serve(0.005)
    assert len(gridded) >= 0.995 * len(exact)
    best = j = 0
    for i, t in enumerate(gridded):
        while gridded[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    assert best <= 150
