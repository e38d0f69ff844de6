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
    # Asked just before the request is written: False and nothing is written, the push raises
    # :class:`NotSent`. The worker's quota was granted before (before a wait for a new
    # connection too: resolving, connecting, the TLS handshake); a receiver counts the request
    # when it arrives (worker.runtime: ``_gate``). A client that cannot ask right before its
    # write says how late after its last look it may write (:attr:`Pusher.write_margin_s`).
    gate: Callable[[], bool] | None = None
    # Told the wall-clock time of a write that came more than the client's margin
    # (:attr:`Pusher.write_margin_s`) after the gate's yes, right after that write, before
    # anything else runs (a client with :attr:`Pusher.exact_writes`): the worker moves the
    # request's grant there at once (worker.runtime: ``_written_late``), not when the answer
    # comes, which may be after the grant a quota later was made.
    written: Callable[[float], None] | None = None
    # Bytes of the response body to keep for the attempt log (the topic's
    # ``response_excerpt_bytes``; 0: none, the body is counted, never kept).
    excerpt_bytes: int = 0


class NotSent(Exception):
    """The request's ``gate`` said no after the pusher's wait: nothing was written."""


class PushResult(NamedTuple):
    """What the endpoint answered: ``status`` 0 means no HTTP response (see ``error``)."""

    status: int
    elapsed_s: float
    retry_after_s: float | None = None
    error: str | None = None
    # Wall-clock time just after the request was written (0.0: not known). The worker moves
    # the request's quota grant there when the write came later than the grant allowed
    # (worker.runtime: ``_written_late``).
    sent_at: float = 0.0
    # For the attempt log (emq.core.attempts): the raw ``Retry-After``, ``Content-Type`` and
    # ``Content-Length`` of the answer and the body's first ``excerpt_bytes`` (each None when
    # absent); None when there was no answer.
    meta: tuple[bytes | None, bytes | None, bytes | None, bytes | None] | None = None


class Pusher(AsyncResource):
    """Delivers HTTP requests (one session, fixed sender pool, per-endpoint caps)."""

    # How long after the worker's last look at a request's quota grant (its ``gate``, or the
    # start of the push for a client that does not ask it before writing) the request may
    # reach its socket. The worker's pacing window is one second plus this (worker.groups:
    # ``grant_window_s``), so what a receiver counts in any second stays within the quota. The
    # default is what a push's own awaits before its write can take on a busy machine. A client
    # that asks the gate right before each write and tells when it wrote (``sent_at``) may say
    # less: a write later than that has its grant moved to it (worker.runtime._written_late).
    write_margin_s: float = 0.005
    # True: the gate is asked right before every write (the worker then looks at the grant
    # there only: a look when the push starts too would move most late grants twice).
    gate_before_write: bool = False
    # True: the gate is asked right before every write and a later write than
    # ``write_margin_s`` after it is told at once (the request's ``written``): every request
    # then reaches its socket within its grant's window, and the worker gives each group's
    # sliding log one spare lane (worker.groups: ``SpareLaneLog``).
    exact_writes: bool = False

    @abc.abstractmethod
    async def push(self, request: PushRequest) -> PushResult:
        """Send ``request``; raises ``DestinationRefused`` if the SSRF guard refuses it."""
