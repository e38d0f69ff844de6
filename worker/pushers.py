"""The push executor a worker uses, by ``EMQ_WORKER_HTTP_CLIENT``.

* ``lean`` (:class:`worker.http1.LeanPusher`): HTTP/1.1 on asyncio protocols with ``httptools``;
  a third of aiohttp's CPU per request or less (``emq bench push-clients``);
* ``aiohttp`` (:class:`worker.push.PushExecutor`): the aiohttp client session.

Both keep the same contract (the SSRF guard, timeouts, no redirects, capped reads, TLS
verification; the tests run against both).
"""

from __future__ import annotations

import ssl

from worker.http1 import LeanPusher
from worker.push import PushExecutor
from worker.settings import HTTP_CLIENTS, WorkerSettings
from worker.ssrf import AddressPolicy

__all__ = ["HTTP_CLIENTS", "make_pusher"]


def make_pusher(
    settings: WorkerSettings, policy: AddressPolicy, ssl_context: ssl.SSLContext | None = None
) -> LeanPusher | PushExecutor:
    """The executor ``settings.http_client`` names (not started: ``async with`` it)."""
    if settings.http_client == "lean":
        return LeanPusher(settings, policy, ssl_context)
    return PushExecutor(settings, policy, ssl_context)
