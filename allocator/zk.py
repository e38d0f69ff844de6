"""kazoo ↔ asyncio: await kazoo's async results, and wake the loop from kazoo's threads.

kazoo calls back on its own threads; nothing here blocks one. A result is awaited by linking a
callback that only does ``loop.call_soon_threadsafe``; a watch likewise only sets an
:class:`asyncio.Event` through the loop. Errors that mean "ZooKeeper cannot answer now"
(connection loss, expired session, a request that timed out) become
:class:`~emq.core.errors.BackendUnavailable`; the ones callers give a meaning to (no node, node
exists, bad version) are raised as kazoo's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import (  # type: ignore[import-untyped]
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from emq.core import threads
from emq.core.errors import BackendUnavailable
from emq.core.threads import call_soon

__all__ = ["MEANINGFUL", "Poke", "call_soon", "check", "failed_op", "one", "settle", "unavailable"]

MEANINGFUL = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


def unavailable(error: BaseException, what: str) -> BackendUnavailable:
    if isinstance(error, NoAuthError):  # a process without (or with other) EMQ_ZK_AUTH
        return BackendUnavailable(
            f"ZooKeeper refused access while {what}: the node's ACL wants other credentials "
            "(set EMQ_ZK_AUTH to the ones the EMQ tree was secured with)"
        )
    return BackendUnavailable(f"ZooKeeper failed while {what}: {type(error).__name__} {error}")


async def settle(pending: Sequence[Any], what: str, timeout_s: float) -> list[object]:
    """Await kazoo async results; each outcome is its value or its exception (not raised)."""
    try:
        return await threads.settle(pending, timeout_s)
    except TimeoutError as e:
        raise BackendUnavailable(f"ZooKeeper did not answer in {timeout_s:g} s: {what}") from e


def check(outcome: object, what: str) -> Any:
    """The value of one outcome; meaningful kazoo errors re-raised, the others translated."""
    if isinstance(outcome, MEANINGFUL):
        raise outcome
    if isinstance(outcome, BaseException):
        raise unavailable(outcome, what) from outcome
    return outcome


async def one(pending: Any, what: str, timeout_s: float) -> Any:
    """Await one kazoo async call and return its value (see :func:`check`)."""
    [outcome] = await settle([pending], what, timeout_s)
    return check(outcome, what)


def failed_op(results: Sequence[object]) -> tuple[int, BaseException] | None:
    """The first failed operation of a committed transaction, or None if it succeeded."""
    for index, result in enumerate(results):
        # ZooKeeper reports the operations around the failed one as rolled back.
        if isinstance(result, BaseException) and not isinstance(result, RolledBackError):
            return index, result
    return None


class Poke:
    """An asyncio.Event that kazoo watches may set from their threads."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        self.closed = False

    def __call__(self, *_args: object) -> bool | None:
        """A kazoo watch callback: never blocks; False (for recipes) once closed."""
        if self.closed or not call_soon(self._loop, self.event.set):
            return False
        return None

    def set(self) -> None:
        self.event.set()

    async def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until poked (True) or ``timeout_s`` passed (False); clears the event."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True
