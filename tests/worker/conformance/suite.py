"""The conformance suite's driver: a case's pushes against one client, and what every case
must hold (the test modules parametrize it over the cases and both clients)."""

from __future__ import annotations

import asyncio
import ipaddress
import tracemalloc

from emq.core.interfaces import PushRequest, PushResult
from tests.worker.conformance.cases import Case
from tests.worker.conformance.hostile import Hostile
from worker.pushers import make_pusher
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


async def check_case(case: Case, client: str) -> None:
    """Run ``case`` against ``client`` and assert every invariant (module docstring of
    :mod:`tests.worker.conformance.test_push_clients`)."""
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
    # A push that failed (a protocol error, a timeout, a reset) leaves no connection to reuse.
    for job, result in results:
        if result.status == 0:
            (seen,) = [s for s in endpoint.seen if s.job == job] or [None]
            if seen is not None:
                later = [s for s in endpoint.seen if s.conn == seen.conn and s.index > seen.index]
                assert later == [], (job, result, later)
    if case.heavy:
        assert peak < MEMORY_BOUND, peak
