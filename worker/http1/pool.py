"""The lean client's connections: a keep-alive pool per destination, opened only to checked
addresses.

A destination is (scheme, host, port); its idle connections are a list, most recently used
last (a warm connection, least likely to have been closed by the peer's idle timeout). A
request takes an idle connection or opens one; a connection whose answer is complete puts
itself back (:mod:`worker.http1.connection`). There is no limit on connections per destination:
the callers bound concurrency (the sender pool, each topic's endpoint concurrency,
``EMQ_WORKER_MAX_IN_FLIGHT``), as with the aiohttp executor (``limit=0``).

Opening resolves the host through the SSRF guard (:class:`worker.ssrf.GuardedResolver`: every
address checked, ``DestinationRefused`` if any is refused) and connects to those addresses only,
one after another, so a second, different DNS answer is never used. Answers are cached for
``DNS_TTL_S`` (as aiohttp's ``ttl_dns_cache``). An IP-literal host was checked with the URL
(:func:`worker.http1.wire.target_of`) and is connected to directly. TLS: the context verifies
the peer's certificate and name (``ssl.create_default_context()`` unless given one), SNI is the
URL's host, never the address. Resolving, connecting and the TLS handshake together end at the
connect timeout.

:meth:`Pool.sweep` (every ``SWEEP_S``) closes connections idle for longer than
``KEEPALIVE_S`` and forgets destinations without connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable

from worker.http1.connection import DEFAULT_LIMITS, Connection, Limits, unreported
from worker.http1.wire import Target
from worker.ssrf import GuardedResolver

DNS_TTL_S = 10.0
DNS_CACHE_SIZE = 4096
KEEPALIVE_S = 15.0  # an idle connection is closed after this long (aiohttp's default too)
SWEEP_S = 5.0

Address = tuple[int, str]  # (family, address)


class Pool:
    """Idle connections per destination, and the opening of new ones."""

    def __init__(
        self,
        resolver: GuardedResolver,
        max_body: int,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits = DEFAULT_LIMITS,
        report: Callable[[str, str], None] | None = None,
    ) -> None:
        self._resolver = resolver
        self._max_body = max_body
        self._ssl = ssl_context
        self._limits = limits
        self._report = report
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._dns: dict[tuple[str, int], tuple[float, list[Address]]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def idle(self, key: tuple[str, str, int]) -> Connection | None:
        """An open idle connection to ``key`` (the most recently used), or ``None``."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def keep(self, conn: Connection) -> None:
        """Put a connection that carried nothing yet among its destination's idle ones."""
        conn.idle_since = asyncio.get_running_loop().time()
        self._release(conn)

    def _release(self, conn: Connection) -> None:
        idle = self._idle.get(conn.key)
        if idle is None:
            idle = self._idle[conn.key] = []
        idle.append(conn)

    async def open(self, target: Target, timeout_s: float) -> Connection:
        """A new connection to ``target`` (raises ``DestinationRefused``, ``OSError``,
        ``TimeoutError``)."""
        async with asyncio.timeout(timeout_s):
            addresses = await self._addresses(target)
            error: OSError | None = None
            for family, address in addresses:
                try:
                    return await self._connect(target, family, address)
                except OSError as e:  # refused, unreachable, TLS verification failed
                    error = e
            assert error is not None
            raise error

    async def _connect(self, target: Target, family: int, address: str) -> Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls() if target.tls else None
        key = target.key
        limits, report = self._limits, self._report or unreported
        _, conn = await loop.create_connection(
            lambda: Connection(
                loop, key, self._release, self._open.discard, self._max_body, *limits, report
            ),
            address,
            target.port,
            family=family,
            ssl=tls,
            server_hostname=target.host if tls else None,
        )
        self._open.add(conn)
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _addresses(self, target: Target) -> list[Address]:
        try:
            ip = ipaddress.ip_address(target.host)
        except ValueError:
            pass
        else:  # a literal: checked with the URL
            return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, target.host)]
        key = (target.host, target.port)
        cached = self._dns.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        found = await self._resolver.resolve(target.host, target.port, socket.AF_UNSPEC)
        addresses = [(int(r["family"]), str(r["host"])) for r in found]
        if len(self._dns) >= DNS_CACHE_SIZE:
            self._dns.clear()
        self._dns[key] = (now + DNS_TTL_S, addresses)
        return addresses

    def sweep(self, now: float) -> None:
        """Close connections idle since before ``now - KEEPALIVE_S`` (loop time); forget
        destinations left without idle connections."""
        horizon = now - KEEPALIVE_S
        for key, idle in list(self._idle.items()):
            keep = [c for c in idle if not c.closed and c.idle_since >= horizon]
            for conn in idle:
                if not conn.closed and conn.idle_since < horizon:
                    conn.abort()
            idle[:] = keep
            if not idle:
                del self._idle[key]

    def close(self) -> None:
        """Close every connection, idle or busy."""
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()
