"""The push seam: delivers one HTTP request (``worker``: the lean HTTP/1.1 client or aiohttp)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import NamedTuple

from emq.core.interfaces.resource import AsyncResource


class PushRequest(NamedTuple):
    """One HTTP request to deliver, already signed (a named tuple: one is made per push)."""

    url: str
    method: str
    headers: Mapping[str, str]
    body: bytes | None
    endpoint: str  # the concurrency-cap key: one topic's endpoint
    # Asked just before the request is written when the pusher had to wait first (a new
    # connection: resolving, connecting, the TLS handshake): False and nothing is written, the
    # push raises :class:`NotSent`. The worker's quota was granted before the wait; a receiver
    # counts the request when it arrives (worker.runtime: ``_gate``).
    gate: Callable[[], bool] | None = None


class NotSent(Exception):
    """The request's ``gate`` said no after the pusher's wait: nothing was written."""


class PushResult(NamedTuple):
    """What the endpoint answered: ``status`` 0 means no HTTP response (see ``error``)."""

    status: int
    elapsed_s: float
    retry_after_s: float | None = None
    error: str | None = None


class Pusher(AsyncResource):
    """Delivers HTTP requests (one session, fixed sender pool, per-endpoint caps)."""

    @abc.abstractmethod
    async def push(self, request: PushRequest) -> PushResult:
        """Send ``request``; raises ``DestinationRefused`` if the SSRF guard refuses it."""
