"""Riding out a backend outage: every long-running worker loop pauses and resumes through here.

A loop that meets :class:`~emq.core.errors.BackendUnavailable` must not die (the worker stops when a
task dies) and must not spin: it calls :meth:`Outage.pause`, which sleeps with exponential
backoff, and :meth:`Outage.resumed` once a call succeeds again. Per loop (``what``)::

    RUNNING --BackendUnavailable--> PAUSED (warning logged once, sleeps 50 ms, 100 ms ... 1 s)
       ^                               | BackendUnavailable again: sleeps longer, logs nothing
       +------- a call succeeds -------+ (info: "resumed after N s")

The backoff is capped at :data:`MAX_PAUSE_S` so that every loop tries again within that long
after the server is back: delivery resumes within ~1 s of Redis answering again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from emq.core.errors import BackendUnavailable

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0

_T = TypeVar("_T")


class Outage:
    """The pause/resume bookkeeping of one worker's loops (one instance, shared)."""

    def __init__(
        self,
        first_s: float = FIRST_PAUSE_S,
        max_s: float = MAX_PAUSE_S,
        *,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._first = first_s
        self._max = max_s
        self._rand = rand
        self._paused: dict[str, tuple[float, int]] = {}  # loop -> (paused since, failures)

    def paused(self) -> dict[str, float]:
        """Loops paused right now, with how long they have been paused (seconds)."""
        now = time.monotonic()
        return {what: now - since for what, (since, _) in self._paused.items()}

    async def pause(self, what: str, error: BackendUnavailable) -> None:
        """``what`` failed with ``error``: log it (once per outage) and sleep before a retry."""
        failures = self.noted(what, error)
        delay = min(self._max, self._first * 2 ** (failures - 1))
        await asyncio.sleep(delay * (0.5 + self._rand() / 2))  # jitter: loops don't go in step

    def noted(self, what: str, error: BackendUnavailable) -> int:
        """Record a failure of ``what`` without sleeping (for loops on their own timer);
        returns the failures so far in this outage."""
        since, failures = self._paused.get(what, (time.monotonic(), 0))
        if failures == 0:
            log.warning("%s paused: %s; retrying until it answers", what, error.message)
        self._paused[what] = (since, failures + 1)
        return failures + 1

    def resumed(self, what: str) -> None:
        """``what`` succeeded: end its pause (cheap when it was not paused: the hot path)."""
        if self._paused:
            paused = self._paused.pop(what, None)
            if paused is not None:
                log.info("%s resumed after %.1f s", what, time.monotonic() - paused[0])

    async def retry(
        self, what: str, call: Callable[[], Awaitable[_T]], *, give_up: Callable[[], bool]
    ) -> _T | None:
        """``await call()`` until it succeeds (its result) or ``give_up()`` is true (None)."""
        while not give_up():
            try:
                result = await call()
            except BackendUnavailable as e:
                await self.pause(what, e)
                continue
            self.resumed(what)
            return result
        self._paused.pop(what, None)
        return None
