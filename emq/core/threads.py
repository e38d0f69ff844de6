"""Awaiting on the event loop what completes on other threads (kazoo's async results).

One piece for both ZooKeeper users (``adapters.zk_config`` and ``allocator``), which may not
import each other: standard library only, so it sits in the core. A result is awaited by
linking a callback that only does ``loop.call_soon_threadsafe``; nothing here blocks the
calling thread. Results are duck-typed as kazoo's ``IAsyncResult``: ``rawlink(callback)``,
``exception``, ``value``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> bool:
    """Hand ``fn`` to the loop from any thread; False if the loop is gone."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        return False
    return True


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class _Countdown:
    """Wakes the loop once, when the last of a batch of results has arrived."""

    def __init__(self, pending: Sequence[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        # By identity, not a counter: kazoo may call back twice for one result (its _call sets
        # the exception twice when it races close()), which must not end the batch early.
        self._left = {id(r) for r in pending}
        self._loop = loop
        self._lock = threading.Lock()  # rawlink callbacks may run on more than one thread

    def tick(self, result: object) -> None:
        with self._lock:
            self._left.discard(id(result))
            if self._left:
                return
        call_soon(self._loop, _resolve, self.done)


async def settle(pending: Sequence[Any], timeout_s: float | None = None) -> list[object]:
    """Await every result; each outcome is its value or its exception (not raised).

    Raises ``TimeoutError`` when they have not all arrived within ``timeout_s``.
    """
    if not pending:
        return []
    countdown = _Countdown(pending, asyncio.get_running_loop())
    for result in pending:
        result.rawlink(countdown.tick)
    async with asyncio.timeout(timeout_s):
        await countdown.done
    return [r.exception if r.exception is not None else r.value for r in pending]
