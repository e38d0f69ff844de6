"""The lean push client: HTTP/1.1 on asyncio protocols, ``httptools`` parsing its responses.

``EMQ_WORKER_HTTP_CLIENT=lean`` picks it (:func:`worker.pushers.make_pusher`). Modules:
:mod:`~worker.http1.wire` (URL targets, request bytes, what cannot be sent),
:mod:`~worker.http1.connection` (one keep-alive connection: send, parse, states),
:mod:`~worker.http1.pool` (idle connections per destination, opening to checked addresses),
:mod:`~worker.http1.pusher` (the ``Pusher``).
"""

from worker.http1.pusher import LeanPusher

__all__ = ["LeanPusher"]
