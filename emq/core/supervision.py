"""Long-lived tasks that ride out a backend outage: the one helper every process runs them with.

A background loop (a worker's fetcher, promoter, hold checker, snapshot publisher ...; the API's
history recorder) handles the outages it expects itself, pausing and retrying where it knows
what to retry. :func:`supervised` is the net under all of them: a
:class:`~emq.core.errors.BackendUnavailable` that escapes the loop (Redis or ZooKeeper could
not serve a call the loop did not guard) restarts it after a backoff instead of ending the task,
and with it the process (ARCHITECTURE.md invariant 8). Driver errors reach it translated: the
adapters turn every driver error meaning "unavailable" (connection errors, closed transports,
a Cluster slot without a master) into BackendUnavailable at their seam. States::

    RUNNING --BackendUnavailable--> BACKING_OFF (sleeps 50 ms, 100 ms ... 1 s, jittered;
       ^                               |          a warning for the first of a streak)
       +---------- restarted ----------+
    RUNNING --returns--> DONE          RUNNING --any other exception--> FAILED (raised: a bug,
                                                                          the owner decides)

A run that lasted longer than the longest backoff ends the streak: the next failure starts
from the shortest backoff again and is logged again. Cancellation ends the task as usual.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from emq.core.errors import BackendUnavailable
from emq.core.tasks import raise_if_cancelling

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


class Backoff:
    """Exponential backoff with jitter over one streak of failures (see the module)."""

    def __init__(
        self,
        first_s: float = FIRST_BACKOFF_S,
        max_s: float = MAX_BACKOFF_S,
        *,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self._rand = rand
        self.failures = 0

    def failed(self, ran_s: float) -> float:
        """A run of ``ran_s`` seconds failed: the seconds to wait before the next one."""
        if ran_s > self.max_s:
            self.failures = 0
        self.failures += 1
        delay: float = min(self.max_s, self.first_s * 2.0 ** (self.failures - 1))
        return delay * (0.5 + self._rand() / 2)  # jitter: restarted loops don't go in step


async def supervised(
    name: str,
    run: Callable[[], Awaitable[object]],
    *,
    backoff: Backoff | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Await ``run()`` until it returns; restart it after a backoff whenever a
    BackendUnavailable escapes it (see the module). ``name`` appears in the log."""
    backoff = backoff or Backoff()
    while True:
        started = clock()
        try:
            await run()
            return
        except BackendUnavailable as e:
            raise_if_cancelling()  # (a cancel the driver swallowed: not restarted)
            delay = backoff.failed(clock() - started)
            if backoff.failures == 1:
                log.warning("%s stopped by an outage (%s); restarting it", name, e.message)
        await asyncio.sleep(delay)


def start_supervised(
    name: str, run: Callable[[], Awaitable[object]], *, task_name: str | None = None
) -> asyncio.Task[None]:
    """``asyncio.create_task(supervised(name, run))``, the task named ``task_name`` (or
    ``name``). The caller keeps a reference to it (an unreferenced task may be collected)."""
    return asyncio.create_task(supervised(name, run), name=task_name or name)
