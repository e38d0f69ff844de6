"""Pacing in few loop turns (worker.dispatch): quota-limited groups come back on a grid they all
share, losing no grant to it; the loop sleeps until the first group is due, not a tick at most,
unless jobs wait for a sender; a group due a tick or more before the pause ends wakes it."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from tests.worker.test_keys import WALL, fill, group
from worker.dispatch import IDLE_WAIT_S, Dispatcher
from worker.groups import Buffered, GrantLog, GroupState, SpareLaneLog

TICK, GRID = 0.005, 0.01


class Sent:
    """A send that frees its endpoint slot at once (the push is instant)."""

    def __init__(self) -> None:
        self.items: list[Buffered] = []

    def __call__(self, g: GroupState, item: Buffered) -> None:
        self.items.append(item)


def on_grid(at: float, grid: float = GRID) -> bool:
    return abs(at / grid - round(at / grid)) < 1e-6


def backlogged(qps: int, jobs: int, priority: int = 1) -> tuple[Dispatcher, Sent, GroupState]:
    sent = Sent()
    d = Dispatcher(sent, TICK, GRID)
    g = group(f"g{qps}", qps)
    fill(g, [None] * jobs, priority)
    return d, sent, g


def test_a_quota_limited_group_comes_back_at_the_next_point_of_the_grid() -> None:
    d, sent, g = backlogged(10, 50)
    mono = time.monotonic()
    d.wake(g, 0.0)
    d.dispatch(100, WALL, mono)
    assert len(sent.items) == 1  # (a bucket of 1.3 tokens at 10 QPS)
    wait = g.counter.wait_s(WALL)
    assert wait > 0.05
    assert on_grid(g.due) and mono + wait <= g.due < mono + wait + GRID


def test_groups_due_within_one_stretch_of_the_grid_share_one_turn() -> None:
    d, sent, a = backlogged(10, 50)
    b = group("other", 10)
    fill(b, [None] * 50)
    mono = math.floor(time.monotonic() / GRID) * GRID + 0.001  # (just past a grid point)
    d.wake(a, 0.0)
    d.wake(b, 0.0)
    d.dispatch(100, WALL, mono)
    d.wake(b, 0.0)  # b again 3 ms later: its next grant is due 3 ms after a's
    d.dispatch(100, WALL + 0.003, mono + 0.003)
    assert a.due == b.due and on_grid(a.due)
    assert len(sent.items) == 2
    d.dispatch(100, WALL + (a.due - mono), a.due)  # one turn at that point serves both
    assert len(sent.items) == 4


def test_a_group_with_a_high_job_waiting_comes_back_exactly_when_due() -> None:
    d, _, g = backlogged(10, 50, priority=0)
    mono = time.monotonic()
    d.wake(g, 0.0)
    d.dispatch(100, WALL, mono)
    assert g.due == pytest.approx(mono + g.counter.wait_s(WALL), abs=1e-9)


@pytest.mark.parametrize("log", [SpareLaneLog, GrantLog])
@pytest.mark.parametrize("qps", [1, 7, 10, 100, 150])
def test_the_grid_costs_a_backlogged_group_no_grant(qps: int, log: type[GrantLog]) -> None:
    """Ten seconds of a backlogged group served exactly when due and on the grid: the same
    number of jobs. Paced by its bucket (the lean client's spare lane), the group is at most 10
    ms late and its bucket holds 30 ms of the quota; paced by its log (aiohttp's), it is served
    exactly when due."""

    def served(grid: float) -> int:
        sent = Sent()
        d = Dispatcher(sent, TICK, grid)
        g = group(f"q{qps}", qps, log)
        fill(g, [None] * (qps * 12 + 10))
        start = 1000.0
        d.wake(g, start)
        mono = start
        while mono < start + 10.0:
            d.dispatch(1000, WALL + (mono - start), mono)
            assert g.scheduled
            mono = g.due
        return len(sent.items)

    exact, gridded = served(0.0), served(GRID)
    assert exact >= qps * 10 * 0.99  # (the log counts each grant a little over a second)
    assert gridded >= exact - 1  # (the last grant may fall just past the ten seconds)


async def pausing(d: Dispatcher, busy: bool) -> tuple[asyncio.Task[None], float]:
    """Start ``d.pause(busy)``; returns the task and how long the pause is to last."""
    task = asyncio.create_task(d.pause(busy))
    await asyncio.sleep(0)
    return task, d._sleep_until - time.monotonic()


async def test_the_loop_sleeps_until_the_first_group_is_due_not_a_tick() -> None:
    d, _, g = backlogged(10, 5)
    d.wake(g, time.monotonic() + 0.06)
    task, lasts = await pausing(d, busy=False)
    assert 0.04 < lasts <= 0.06
    task.cancel()
    d.wake(g, time.monotonic() + 1.0)  # (far off: no later than IDLE_WAIT_S)
    task, lasts = await pausing(d, busy=False)
    assert lasts <= IDLE_WAIT_S
    task.cancel()


async def test_with_jobs_waiting_for_a_sender_the_loop_looks_again_in_a_tick() -> None:
    d, _, g = backlogged(10, 5)
    d.wake(g, time.monotonic() + 0.06)
    task, lasts = await pausing(d, busy=True)
    assert lasts <= TICK
    task.cancel()


async def test_a_group_due_a_tick_or_more_sooner_ends_the_pause() -> None:
    d, _, g = backlogged(10, 5)
    other = group("other", 10)
    fill(other, [None])
    d.wake(g, time.monotonic() + 0.08)
    task, _ = await pausing(d, busy=False)
    d.wake(other, d._sleep_until - TICK / 2)  # within a tick of the pause's end: sleeps on
    await asyncio.sleep(0)
    assert not task.done()
    d.wake(other, time.monotonic())  # new jobs to send now
    await asyncio.sleep(0)
    assert task.done()


async def test_a_pause_that_runs_its_course_samples_the_loops_lag() -> None:
    d = Dispatcher(Sent(), TICK, GRID)
    d.lag_s = -1.0
    await d.pause(busy=False)  # (nothing due: IDLE_WAIT_S)
    assert 0.0 <= d.lag_s < IDLE_WAIT_S
    d.lag_s = -1.0
    g = group("woken", 10)
    fill(g, [None])
    task, _ = await pausing(d, busy=False)
    d.wake(g, time.monotonic())  # ended early: no sample
    await task
    assert d.lag_s == -1.0
