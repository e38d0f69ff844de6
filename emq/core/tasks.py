"""Background loops that stop when cancelled, even when a driver swallowed the cancel.

A cancel that lands inside a Redis call can be swallowed by the driver (redis-py): the task
stays "cancelling" and its ``while True`` goes on: the replay mover ticking on
(``worker.replay``), or the API's enqueue history (``emq.api.history``) holding its app's
cleanup until something else kills the process. A loop that calls :func:`raise_if_cancelling`
once per turn honours the cancel on its next turn.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` if the current task was asked to cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
