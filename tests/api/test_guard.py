"""The connection guards' own bookkeeping and the aiohttp surface they stand on.

The guards' behaviour against hostile clients is pinned in ``tests/api/test_hostile.py``; here:
what aiohttp must keep offering (public, but a change would disarm a guard), and that every
connection, served, refused or timed out, leaves nothing behind once closed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from emq.api.guard import ConnectionLimits, GuardedRunner

LIMITS = ConnectionLimits(max_connections=3, header_timeout_s=0.3)


def test_the_aiohttp_surface_the_guards_use_is_public() -> None:
    """``web.RequestHandler`` (exported) built with the documented protocol keywords, its
    ``handle_error`` (overridden for the JSON shape), ``AppRunner.server`` and the handler's
    protocol methods. If aiohttp renames one, this fails before a guard silently stops."""
    assert {"RequestHandler", "Server", "AppRunner", "middleware"} <= set(web.__all__)
    init = inspect.signature(web.RequestHandler.__init__).parameters
    assert {"manager", "loop", "keepalive_timeout", "lingering_time", "access_log"} <= set(init)
    handle_error = list(inspect.signature(web.RequestHandler.handle_error).parameters)
    assert handle_error == ["self", "request", "status", "exc", "message"]
    assert isinstance(inspect.getattr_static(web.AppRunner, "server"), property)
    for method in ("connection_made", "connection_lost", "data_received", "eof_received"):
        assert callable(getattr(web.RequestHandler, method))
    assert callable(web.RequestHandler.force_close)


async def _hello(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.fixture
async def guarded() -> AsyncIterator[tuple[GuardedRunner, int]]:
    app = web.Application()
    app.router.add_get("/x", _hello)
    runner = GuardedRunner(app, LIMITS, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    port = await runner.listen("127.0.0.1", 0)
    yield runner, port
    await runner.cleanup()


async def _get(port: int) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    return await reader.readuntil(b"\r\n\r\n"), reader, writer


async def _closed(runner: GuardedRunner) -> None:
    async def settled() -> None:
        while runner.guard.open or runner.guard.connections:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(settled(), 5)


async def test_every_connection_leaves_nothing_behind(guarded: tuple[GuardedRunner, int]) -> None:
    runner, port = guarded
    served = [await _get(port) for _ in range(LIMITS.max_connections)]
    assert all(head.startswith(b"HTTP/1.1 200") for head, _, _ in served)
    assert runner.guard.open == LIMITS.max_connections
    assert len(runner.guard.connections) == LIMITS.max_connections

    refused, reader, writer = await _get(port)  # one too many: no handler, closed at once
    assert refused.startswith(b"HTTP/1.1 503")
    await reader.read()
    writer.close()
    assert len(runner.guard.connections) == LIMITS.max_connections

    for _, _, w in served:
        w.close()
    await _closed(runner)

    reader, writer = await asyncio.open_connection("127.0.0.1", port)  # says nothing: 408
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 408")
    await reader.read()
    writer.close()
    await _closed(runner)


async def test_the_guard_middleware_runs_outermost(guarded: tuple[GuardedRunner, int]) -> None:
    runner, _ = guarded
    assert runner.app.middlewares[0] == runner.guard.middleware
