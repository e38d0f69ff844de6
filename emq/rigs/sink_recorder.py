"""The sink on the caller's event loop (tests, ``emq demo``): :class:`Sink` answers each topic
as its :class:`Behaviour` says (a status, a ``Retry-After``, a delay, a hang, failures first) and
records each 2xx as a :class:`Delivery`. The HTTP side is :class:`emq.rigs.sink.SinkProtocol`,
which calls :meth:`Sink.arrived` and :meth:`Sink.gave_up`; the sink answers through the
connection's ``hold``, ``resume`` and ``answer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emq.rigs.sink_stats import Stats, get_header, parse_headers

if TYPE_CHECKING:
    from emq.rigs.sink import SinkProtocol


HANG_SETTLE_S = 0.01  # see Sink.arrived


@dataclass
class Behaviour:
    """How a :class:`Sink` answers one topic: in this order, hang until released (or the client
    gives up), wait ``delay_s`` (plus up to ``jitter_s``: requests overtake each other), answer
    ``500`` to the first ``fail_first`` requests, else ``status`` (with ``Retry-After``, other
    ``headers`` and ``body``)."""

    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    hang: bool = False
    fail_first: int = 0
    jitter_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Delivery:
    """A request a :class:`Sink` answered 2xx: its topic, ``webhook-id``, when, what."""

    topic: str
    job_id: str
    at: float
    headers: dict[str, str]
    body: bytes


class Sink:
    """The sink on this event loop (tests, ``emq demo``): ``/t/<topic>`` is answered as
    ``behaviour[topic]`` says and, when 2xx, recorded in ``deliveries`` (unless
    ``keep_deliveries`` is off) and counted in ``stats`` like the process's (per second,
    latency). The path-steered endpoints (``/hang/``, ``/slow/``...) work here too.

    ``attempts`` counts requests per ``webhook-id``; ``first_attempt_at`` is when each id was
    first taken on (after a hang); ``hanging_now``/``max_hanging`` count held requests.
    Subclasses may override :meth:`on_arrival` to look at each request's connection.
    """

    def __init__(
        self,
        *,
        record: bool = False,
        keep_deliveries: bool = True,
        latency_header: str = "X-Bench-Sent",
    ) -> None:
        self.stats = Stats(record, latency_header)
        self.keep_deliveries = keep_deliveries
        self.deliveries: list[Delivery] = []
        self.attempts: Counter[str] = Counter()
        self.first_attempt_at: dict[str, float] = {}
        self.behaviour: defaultdict[str, Behaviour] = defaultdict(Behaviour)
        self.hanging_now = 0
        self.max_hanging = 0
        self.base = ""
        self.port = 0
        self._held: dict[SinkProtocol, Callable[[], None]] = {}

    @contextlib.asynccontextmanager
    async def serving(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[Sink]:
        """Listen on ``host:port`` (0: a free port) until the block ends; held requests are
        released (answered) before the server closes."""
        from emq.rigs.sink import SinkProtocol  # the HTTP side imports this module
        from emq.rigs.stamped import StampedServer

        # Arrivals stamped by the kernel: a test judges pacing from them, and this loop (the
        # test's own) may be busy when they arrive.
        server = await StampedServer.listen(lambda: SinkProtocol(self.stats, self), host, port)
        self.port = server.sockets[0].getsockname()[1]
        self.base = f"http://{host}:{self.port}"
        try:
            yield self
        finally:
            self.release_hung()
            server.close()
            await server.wait_closed()

    def url(self, topic: str) -> str:
        return f"{self.base}/t/{topic}"

    def of(self, topic: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.topic == topic]

    def per_second(self, topic: str) -> dict[int, int]:
        """Deliveries of ``topic`` per wall-clock second (when answered)."""
        return dict(Counter(int(d.at) for d in self.of(topic)))

    async def wait_for(self, predicate: Callable[[], object], timeout_s: float) -> bool:
        """Poll ``predicate`` until true or ``timeout_s``; its last value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            await asyncio.sleep(0.05)
        return bool(predicate())

    def release_hung(self) -> None:
        """Answer every held request as its topic's behaviour says (without the hang)."""
        held, self._held = self._held, {}
        for connection, go_on in held.items():
            self.hanging_now -= 1
            connection.resume()
            go_on()

    # ------------------------------------------------------------------ called by SinkProtocol

    def on_arrival(self, connection: SinkProtocol, topic: str) -> None:
        """Each request to ``/t/<topic>``, at arrival (before any hang or delay)."""

    def arrived(
        self, connection: SinkProtocol, topic: str, head: bytes, body: bytes, now: float
    ) -> None:
        headers = parse_headers(head)
        job_id = get_header(headers, "webhook-id")
        self.attempts[job_id] += 1
        self.on_arrival(connection, topic)
        b = self.behaviour[topic]

        def go_on(at: float | None = None) -> None:
            self._take(connection, topic, job_id, headers, body, b, at)

        if b.hang:
            connection.hold()
            self._held[connection] = go_on
            self.hanging_now += 1
            # Counted a moment later: the close of a request its client gave up on and the
            # request that replaces it (on another, pooled connection) can be read in either
            # order within one loop iteration (epoll does not order descriptors). A hang lasts
            # the client's timeout, so HANG_SETTLE_S later no true overlap is missed.
            asyncio.get_running_loop().call_later(HANG_SETTLE_S, self._count_hanging)
            return
        go_on(now)  # answered at once: counted at its arrival

    def _count_hanging(self) -> None:
        self.max_hanging = max(self.max_hanging, self.hanging_now)

    def gave_up(self, connection: SinkProtocol) -> None:
        """A held request's client closed the connection."""
        if self._held.pop(connection, None) is not None:
            self.hanging_now -= 1

    def _take(
        self,
        connection: SinkProtocol,
        topic: str,
        job_id: str,
        headers: dict[str, str],
        body: bytes,
        b: Behaviour,
        arrived_at: float | None,
    ) -> None:
        """Answer as ``b`` says; ``arrived_at``: the arrival's stamp for a request taken on at
        once (None: it was held, taken on now)."""
        self.first_attempt_at.setdefault(job_id, arrived_at or time.time())
        delay = b.delay_s + (random.uniform(0, b.jitter_s) if b.jitter_s else 0.0)
        if delay > 0:
            loop = asyncio.get_running_loop()
            loop.call_later(delay, self._answer, connection, topic, job_id, headers, body, b)
        else:
            self._answer(connection, topic, job_id, headers, body, b, arrived_at)

    def _answer(
        self,
        connection: SinkProtocol,
        topic: str,
        job_id: str,
        headers: dict[str, str],
        body: bytes,
        b: Behaviour,
        at: float | None = None,
    ) -> None:
        """Answer; a 2xx is a delivery, counted ``at`` its arrival when answered at once, else
        now (a delayed or held request: when answered)."""
        if not connection.open:
            return  # the client gave up first: not delivered
        if b.fail_first > 0:
            b.fail_first -= 1
            connection.answer(500)
            return
        if 200 <= b.status < 300:
            now = at or time.time()
            if self.keep_deliveries:
                self.deliveries.append(Delivery(topic, job_id, now, headers, body))
            self._count(topic, headers, now)
        connection.answer(b.status, b.retry_after, b.headers, b.body)

    def _count(self, topic: str, headers: dict[str, str], now: float) -> None:
        stats = self.stats
        if not stats.requests:
            stats.first_at = now
        stats.requests += 1
        stats.last_at = now
        stats.per_second[topic][int(now)] += 1
        sent = get_header(headers, stats.latency_header[2:-1].decode())
        if sent:
            stats.latencies[topic].append(now - float(sent))
