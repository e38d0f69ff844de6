"""Hostile-endpoint conformance of both push clients (ARCHITECTURE.md invariant 9).

Every case of :mod:`tests.worker.conformance.cases`, against each client: a few pushes in turn,
each to a scripted raw-socket endpoint, and for every case:

* no false delivered: a push answered 2xx only if the endpoint answered *that* request with a
  complete 2xx (its job in ``X-Job``);
* nothing lost: every push ends (a result, within the total timeout and a margin), none raises;
* a connection that carried stray bytes never carries another request;
* a failed push says why (``error``), in the case's words where it has some;
* memory bounded (the heavy cases: the client's allocations traced);
* the protocol errors counted by reason (the metric's source).
"""

from __future__ import annotations

import asyncio
import ipaddress
import tracemalloc

import pytest

from emq.core.interfaces import PushRequest, PushResult
from tests.worker.conformance.cases import CASES, OK, PROTOCOL, TIMED_OUT, Case, always, by_path
from tests.worker.conformance.hostile import Hostile, Pause, Stray, never_accepting
from worker.pushers import HTTP_CLIENTS, make_pusher
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy

LOOPBACK = AddressPolicy([ipaddress.ip_network("127.0.0.0/8")])
TOTAL_S = 0.4  # the request's total timeout: the trickles and hangs end here
SETTINGS = {
    "request_timeout_s": TOTAL_S,
    "connect_timeout_s": 0.3,
    "max_response_bytes": 64 * 1024,
}
MEMORY_BOUND = 8 * 1024 * 1024  # peak traced allocations of a heavy case's pushes


def request(url: str, job: str, endpoint: str) -> PushRequest:
    return PushRequest(url, "POST", {"X-Job": job}, b'{"n": 1}', endpoint)


async def run_case(case: Case, client: str) -> tuple[Hostile, list[tuple[str, PushResult]], int]:
    """The case's pushes in turn; (the endpoint's record, each push's job and result, the
    peak bytes the pushes allocated if the case is heavy, else 0)."""
    settings = WorkerSettings(http_client=client, **SETTINGS)  # type: ignore[arg-type]
    results: list[tuple[str, PushResult]] = []
    peak = 0
    async with Hostile(case.script).serving() as endpoint, make_pusher(settings, LOOPBACK) as p:
        if case.heavy:
            tracemalloc.start()
        try:
            for i in range(case.pushes):
                path = case.paths[i % len(case.paths)]
                job = f"{case.name}-{i}"
                pushed = p.push(request(endpoint.url(path), job, f"t{path}"))
                results.append((job, await asyncio.wait_for(pushed, TOTAL_S + 2)))
                if case.settle:
                    await endpoint.settled()
        finally:
            if case.heavy:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
        await endpoint.settled(0.5)
    return endpoint, results, peak


@pytest.mark.parametrize("client", HTTP_CLIENTS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_hostile_endpoint_never_gets_a_push_counted_falsely(
    case: Case, client: str
) -> None:
    endpoint, results, peak = await run_case(case, client)
    lenient = client == "aiohttp" and "aiohttp-lenient" in case.tags
    for job, result in results:
        if 200 <= result.status < 300 and not lenient:
            assert endpoint.truth(job), (job, result, endpoint.seen)  # no false delivered
        if result.status == 0:
            assert result.error, result
            reason = case.of(case.reason, client)
            if reason is not None:
                assert reason in result.error, (job, result)
    delivered = sum(200 <= r.status < 300 for _, r in results)
    want = case.of(case.want, client)
    if want == "all":
        assert delivered == len(results), results
    elif want == "none":
        assert delivered == 0, results
    if client == "lean" or not case.partial_stray:
        assert endpoint.reused_after_stray == [], (endpoint.reused_after_stray, endpoint.seen)
    if case.heavy:
        assert peak < MEMORY_BOUND, peak


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
