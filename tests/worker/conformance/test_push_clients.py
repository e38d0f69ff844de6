"""Hostile-endpoint conformance of both push clients (ARCHITECTURE.md invariant 9).

The cases of :mod:`tests.worker.conformance.cases` (stray bytes, unbounded heads and bodies,
slow and silent endpoints here; framing, malformed responses and resets in
:mod:`~tests.worker.conformance.test_malformed`), against each client: a few pushes in turn,
each to a scripted raw-socket endpoint, and for every case:

* no false delivered: a push answered 2xx only if the endpoint answered *that* request with a
  complete 2xx (its job in ``X-Job``);
* nothing lost: every push ends (a result, within the total timeout and a margin), none raises;
* a connection that carried stray bytes never carries another request, nor one whose push
  failed (a protocol error, a timeout, a reset);
* a failed push says why (``error``), in the case's words where it has some;
* memory bounded (the heavy cases: the client's allocations traced);
* the protocol errors counted by reason (the metric's source).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.worker.conformance.cases import (
    OK,
    PROTOCOL,
    STRAYS_AND_LIMITS,
    TIMED_OUT,
    Case,
    always,
    by_path,
)
from tests.worker.conformance.hostile import Hostile, Pause, Stray, never_accepting
from tests.worker.conformance.suite import LOOPBACK, SETTINGS, TOTAL_S, check_case, request
from worker.pushers import HTTP_CLIENTS, make_pusher
from worker.settings import WorkerSettings


@pytest.mark.parametrize("client", HTTP_CLIENTS)
@pytest.mark.parametrize("case", STRAYS_AND_LIMITS, ids=[c.name for c in STRAYS_AND_LIMITS])
async def test_a_hostile_endpoint_never_gets_a_push_counted_falsely(
    case: Case, client: str
) -> None:
    await check_case(case, client)


@pytest.mark.parametrize("client", HTTP_CLIENTS)
async def test_protocol_errors_are_counted_by_reason_for_their_endpoint(client: str) -> None:
    settings = WorkerSettings(http_client=client, **SETTINGS)  # type: ignore[arg-type]
    many = b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"Content-Length: 0\r\n\r\n"
    script = by_path(
        {
            "/bad": always([b"SMTP ready\r\n\r\n"], False),
            "/many": always([many], False),
            "/stray": always([OK, Pause(0.01), Stray(OK)], True),  # a second answer while idle
        }
    )
    async with Hostile(script).serving() as endpoint, make_pusher(settings, LOOPBACK) as pusher:
        for path in ("/bad", "/many", "/stray", "/stray"):
            result = await pusher.push(request(endpoint.url(path), path, f"ns/acme{path}"))
            assert (result.status == 200) == (path == "/stray"), result
            await endpoint.settled()
        counts = dict(pusher.protocol_errors.counts)
    assert counts[("ns/acme/bad", "malformed")] == 1, counts
    assert counts[("ns/acme/many", "too_many_headers")] == 1, counts
    # Each /stray push's connection got a second answer: the lean client counts each when it
    # comes; aiohttp when a push finds it on the connection it was given (the second push).
    assert counts[("ns/acme/stray", "stray_bytes")] == (2 if client == "lean" else 1), counts


@pytest.mark.parametrize("client", HTTP_CLIENTS)
async def test_an_endpoint_that_never_accepts_ends_at_the_connect_timeout(client: str) -> None:
    settings = WorkerSettings(http_client=client, **SETTINGS)  # type: ignore[arg-type]
    with never_accepting() as listener:
        port = listener.getsockname()[1]
        async with make_pusher(settings, LOOPBACK) as pusher:
            url = f"http://127.0.0.1:{port}/"
            loop = asyncio.get_running_loop()
            start = loop.time()
            result = await asyncio.wait_for(pusher.push(request(url, "j", "t")), TOTAL_S + 2)
            assert loop.time() - start < TOTAL_S + 0.5
    assert result.status == 0 and result.error, result
    assert TIMED_OUT in result.error or "connect" in result.error, result
    assert PROTOCOL not in result.error
