"""``emq bench dispatch`` runs end to end (its Redis, sink and worker processes start, jobs reach
the sink, the JSON has its shape) and its sink speaks enough HTTP. A benchmark, not a timed test:
no figure is asserted.

W7 and W8 run here; W5 runs in ``emq bench all``'s smoke (``tests/spark/test_bench_suite.py``).
The saturating workloads (W2, W3, ...) stay in ``emq bench dispatch``: they take the machine for
their length, and what they rely on has tests of its own (the send governor:
``tests/worker/test_governor.py``; every job delivered once: the worker's integration tests)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from emq.rigs.sink import SinkProtocol, Stats

SHAPE = {"bench", "workload", "targets", "pass", "contention", "machine"}


def _bench(workload: str, duration_s: float, timeout_s: float) -> dict[str, Any]:
    """``emq bench dispatch --workload W --json`` as a user runs it; its parsed JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env["EMQ_LOG_LEVEL"] = "WARNING"
    argv = [sys.executable, "-m", "emq", "bench", "dispatch", "--workload", workload]
    done = subprocess.run(
        [*argv, "--duration-s", str(duration_s), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_the_sink_counts_keeps_alive_and_never_answers_a_hang() -> None:
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SinkProtocol(stats), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent = f"{time.time():.6f}"
        body = b'{"n":1}'
        one = b"POST /t/a HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n" + body
        two = b"POST /t/b HTTP/1.1\r\nX-Bench-Sent: " + sent.encode() + b"\r\n\r\n"
        writer.write(one + two)  # pipelined on one kept-alive connection
        for _ in range(2):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(b"GET /hang/c HTTP/1.1\r\n\r\n")
        await writer.drain()
        with pytest.raises(TimeoutError):  # no answer, and the connection stays open
            await asyncio.wait_for(reader.read(1), 0.3)
    finally:
        writer.close()
        server.close()
    counts = stats.to_dict()
    assert counts["requests"] == 2 and counts["hung"] == 1
    assert sum(counts["per_second"]["a"].values()) == 1
    assert len(counts["latency_ms"]["b"]) == 1 and "a" not in counts["latency_ms"]


def test_a_short_w7_run_delivers_every_job_of_every_shape() -> None:
    """W7 end to end, one round of each shape (a real worker each, a real sink, real Redis):
    every stored job reached the sink once, and the spreads are read off the three judged
    shapes. No figure is judged here."""
    result = _bench("W7", 0.1, 240)
    assert result.keys() >= SHAPE and result["workload"] == "W7"
    assert set(result["targets"]) == {"jobs_per_s_spread", "cpu_per_job_spread"}
    shapes = result["shapes"]
    assert set(shapes) == {"topics-10", "topics-1000", "topic-100k"}  # (short: not 6670 groups)
    assert [shapes[s]["queues"] for s in ("topics-10", "topics-1000", "topic-100k")] == [
        3000,
        3000,
        2001,
    ]
    for shape in shapes.values():
        assert shape["delivered_at_sink"] == shape["jobs"] == shape["worker_status"]["delivered"]
        assert shape["jobs"] >= shape["queues"]  # a job in every queue at least
    rates = [shapes[s]["jobs_per_s"] for s in ("topics-10", "topics-1000", "topic-100k")]
    assert result["jobs_per_s_spread"] == round(max(rates) / min(rates), 3)
    assert result["rounds"] == 1 and result["many_groups_cpu_ratio"] == 0


async def test_the_logged_path_parses_and_logs_each_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``/logged/<topic>`` (W8's receiver): a JSON body is parsed, logged and counted; one that
    is not JSON gets a 400 and is not counted."""
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SinkProtocol(stats), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    caplog.set_level(logging.INFO, logger="emq.rigs.sink.requests")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for body in (b'{"a":1,"b":"x"}', b"not json"):
            head = b"POST /logged/w8-t HTTP/1.1\r\nwebhook-id: msg_1\r\nContent-Length: %d\r\n\r\n"
            writer.write(head % len(body) + body)
        answers = [await reader.readuntil(b"\r\n\r\n") for _ in range(2)]
    finally:
        writer.close()
        server.close()
    assert answers[0].startswith(b"HTTP/1.1 200") and answers[1].startswith(b"HTTP/1.1 400")
    assert [r.getMessage() for r in caplog.records] == ["w8-t msg_1: 15 bytes, 2 fields"]
    counts = stats.to_dict()
    assert counts["requests"] == 1 and counts["other"] == 1


def test_a_short_w8_run_enqueues_through_the_api_and_delivers_every_job() -> None:
    """W8 end to end (ZooKeeper, an ``emq api`` process, a real worker, the logging receiver),
    one round beside W2's worker: every job enqueued through the API reached the sink once."""
    result = _bench("W8", 0.5, 240)
    assert result.keys() >= SHAPE and result["workload"] == "W8"
    assert set(result["targets"]) == {"cpu_ratio_to_w2"}
    assert result["delivered_at_sink"] == result["jobs"] == 3000
    assert result["worker_status"]["delivered"] == result["jobs"]
    assert result["tenants"] == 10 and result["body_bytes"] == 200
    ratio = result["worker_cpu_us_per_job"] / result["w2_worker_cpu_us_per_job"]
    assert result["cpu_ratio_to_w2"] == round(ratio, 3)
