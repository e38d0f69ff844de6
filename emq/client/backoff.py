"""The one retry policy of the client, the Producer and ``emq enqueue``.

An enqueue answered 503 or not answered at all (connection refused or reset, timeout) is sent
again with exponential backoff and full jitter until ``retry_for_s`` has passed; a 429 after its
Retry-After. What a retry may cost: a request whose first attempt was stored but not answered
(a timeout, a reset, a 503 after Redis took part of a put) stores its jobs twice, unless they
carry an ``idempotency_key``, which the API de-duplicates (the Producer's ``idempotent=True``
gives every job one). A 429 is always safe to retry: the API refuses before writing anything.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from emq.core import errors

DEFAULT_RETRY_FOR_S = 60.0
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 5.0

_T = TypeVar("_T")


class Backoff:
    """When to send an enqueue again, within a deadline of ``retry_for_s`` from the first try.

    Retried: :class:`~emq.core.errors.BackendUnavailable` (a 503, or no answer: refused, reset,
    timed out), after ``FIRST_RETRY_S * 2**n`` capped at ``MAX_RETRY_S`` with full jitter (so
    many clients cut off together do not return together), and :class:`~emq.core.errors.BacklogFull`
    after its Retry-After. Anything else is final (a 4xx will not change by itself).
    """

    def __init__(self, retry_for_s: float, *, rand: Callable[[], float] = random.random) -> None:
        if retry_for_s < 0:
            raise ValueError("retry_for_s must be at least 0")
        self._deadline = time.monotonic() + retry_for_s
        self._rand = rand
        self.attempts = 0

    def delay_for(self, error: BaseException) -> float | None:
        """Seconds to wait before the next try after ``error``, or None: give up (raise it)."""
        if isinstance(error, errors.BacklogFull):
            delay = error.retry_after_s
        elif isinstance(error, errors.BackendUnavailable):
            delay = min(MAX_RETRY_S, FIRST_RETRY_S * 2**self.attempts) * self._rand()
        else:
            return None
        if time.monotonic() + delay > self._deadline:
            return None
        self.attempts += 1
        return delay

    async def run(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """``await call()``, again after each retryable error until the deadline."""
        while True:
            try:
                return await call()
            except (errors.BackendUnavailable, errors.BacklogFull) as e:
                delay = self.delay_for(e)
                if delay is None:
                    raise
                await asyncio.sleep(delay)
