"""``emq bench push-clients``' candidates measure what they say (a short run of each client
written here against the test sink) and report a missing package instead of failing."""

from __future__ import annotations

from typing import Any

import pytest

from emq.bench import push_client_run, push_clients
from emq.rigs.sink import Sink


@pytest.mark.parametrize("client", ["lean", "raw", "aiohttp"])
async def test_a_client_run_counts_what_the_sink_answered(client: str) -> None:
    async with Sink().serving() as sink:
        run = push_client_run.ASYNC_CLIENTS[client]
        figures = await run(sink.base, 3, 4, 0.2)
        # every request counted was answered 200 and reached the sink (warm-up ones too)
        assert figures["requests"] > 0 and figures["failed_requests"] == 0
        assert len(sink.deliveries) >= figures["requests"]
        assert {d.topic for d in sink.deliveries} <= {"c00000", "c00001", "c00002"}
        assert figures["cpu_us_per_request"] > 0


def test_a_missing_package_is_reported_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(push_client_run.PACKAGES, "pycurl", "emq_no_such_package")
    result = push_client_run.run("pycurl", "http://127.0.0.1:9", 1, 1, 0.1)
    assert "not installed" in result["unavailable"]


def test_ratios_are_to_aiohttp_in_the_same_run() -> None:
    best: dict[str, dict[str, Any]] = {
        "aiohttp": {"requests_per_s": 1000.0, "cpu_us_per_request": 80.0},
        "lean": {"requests_per_s": 3000.0, "cpu_us_per_request": 20.0},
        "pyreqwest": {"unavailable": "not installed"},
    }
    push_clients.add_ratios(best)
    assert (best["lean"]["vs_aiohttp_requests"], best["lean"]["vs_aiohttp_cpu"]) == (3.0, 0.25)
    assert "vs_aiohttp_cpu" not in best["pyreqwest"]
    assert "pyreqwest" in push_clients.summary({"concurrency": 64, "rounds": 2, "clients": best})
