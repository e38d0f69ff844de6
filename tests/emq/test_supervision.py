"""emq.core.supervision: long-lived tasks restarted after an outage escapes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from emq.core.errors import BackendUnavailable
from emq.core.supervision import Backoff, start_supervised, supervised


def _backoff() -> Backoff:
    return Backoff(first_s=0.001, max_s=0.008, rand=lambda: 1.0)


async def test_an_outage_restarts_the_loop_until_it_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = []

    async def loop() -> None:
        runs.append(len(runs))
        if len(runs) < 4:
            raise BackendUnavailable("redis unavailable during read: Connection closed by server")

    with caplog.at_level(logging.WARNING, "emq.core.supervision"):
        await asyncio.wait_for(supervised("worker fetch", loop, backoff=_backoff()), 5)
    assert runs == [0, 1, 2, 3]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "worker fetch" in warnings[0]  # once per streak


async def test_any_other_error_ends_the_task() -> None:
    async def loop() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        await supervised("worker holds", loop, backoff=_backoff())


async def test_a_cancelled_task_is_not_restarted() -> None:
    started = asyncio.Event()

    async def loop() -> None:
        started.set()
        await asyncio.sleep(3600)

    task = start_supervised("worker snapshots", loop)
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.get_name() == "worker snapshots"


async def test_a_cancel_the_driver_swallowed_is_not_restarted() -> None:
    """A cancel swallowed inside a Redis call leaves the task "cancelling"; the outage the
    call then raises ends the task instead of starting the loop again."""
    runs = 0

    async def loop() -> None:
        nonlocal runs
        runs += 1
        with contextlib.suppress(asyncio.CancelledError):  # (as a driver might)
            await asyncio.sleep(3600)
        raise BackendUnavailable("closed")

    task = asyncio.create_task(supervised("worker promote", loop, backoff=_backoff()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runs == 1


def test_the_backoff_doubles_to_its_cap_and_a_long_run_ends_the_streak() -> None:
    backoff = Backoff(first_s=0.05, max_s=1.0, rand=lambda: 1.0)
    waits = [backoff.failed(ran_s=0.0) for _ in range(7)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.failed(ran_s=1.5) == 0.05 and backoff.failures == 1
    jittered = Backoff(first_s=0.05, max_s=1.0, rand=lambda: 0.0)
    assert jittered.failed(ran_s=0.0) == 0.025  # half to all of the step
