"""The shared rigs (:mod:`emq.rigs`): the in-process sink answers each topic as its behaviour
says and records what it answered 2xx; the process harness starts, checks and stops a child."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from emq.core.errors import EmqError
from emq.rigs.procs import Proc, SinkProcess, stop_all
from emq.rigs.sink import Sink
from emq.stack import free_port


async def _post(session: aiohttp.ClientSession, url: str, job_id: str) -> tuple[int, str | None]:
    headers = {"webhook-id": job_id, "X-Bench-Sent": f"{time.time():.6f}", "X-Trace": "t1"}
    async with session.post(url, data=b'{"n":1}', headers=headers) as r:
        await r.read()
        return r.status, r.headers.get("Retry-After")


async def test_the_sink_answers_each_topic_as_told_and_records_deliveries() -> None:
    async with Sink().serving() as sink, aiohttp.ClientSession() as session:
        sink.behaviour["busy"].status = 503
        sink.behaviour["busy"].retry_after = "7"
        sink.behaviour["flaky"].fail_first = 2
        sink.behaviour["slow"].delay_s = 0.2
        assert await _post(session, sink.url("ok"), "a") == (200, None)
        assert await _post(session, sink.url("busy"), "b") == (503, "7")
        assert [(await _post(session, sink.url("flaky"), "c"))[0] for _ in range(3)] == [
            500,
            500,
            200,
        ]
        started = time.monotonic()
        assert await _post(session, sink.url("slow"), "d") == (200, None)
        assert time.monotonic() - started >= 0.2
    assert [d.topic for d in sink.deliveries] == ["ok", "flaky", "slow"]
    first = sink.of("ok")[0]
    assert (first.job_id, first.body, first.headers["X-Trace"]) == ("a", b'{"n":1}', "t1")
    assert sink.attempts == {"a": 1, "b": 1, "c": 3, "d": 1}
    assert sum(sink.per_second("flaky").values()) == 1
    assert sink.stats.requests == 3 and len(sink.stats.latencies["slow"]) == 1


def _raw_requests(port: int, go: threading.Event, sent: list[float]) -> None:
    """Two requests on one connection, the second once ``go`` is set; their send times."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for n in range(2):
            if n:
                go.wait(5)
                time.sleep(0.05)  # (the sink's loop is stalled by then)
            request = b"POST /t/ts HTTP/1.1\r\nHost: x\r\nwebhook-id: %d\r\n" % n
            sent.append(time.time())
            sock.sendall(request + b"Content-Length: 2\r\n\r\n{}")
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")


async def test_an_arrival_is_stamped_when_the_kernel_received_it_not_when_the_sink_ran() -> None:
    # A sink on a busy machine runs late; a request that arrived meanwhile still counts in the
    # second it arrived in (emq.rigs.stamped), else a stall's arrivals bunch into one window.
    go, sent = threading.Event(), []
    async with Sink().serving() as sink:
        client = asyncio.get_running_loop().run_in_executor(
            None, _raw_requests, sink.port, go, sent
        )
        assert await sink.wait_for(lambda: len(sink.deliveries) == 1, 5)
        go.set()
        time.sleep(0.4)  # noqa: ASYNC251 (the point: the sink's loop stalls; a request arrives)
        stalled_until = time.time()
        await asyncio.wait_for(client, 5)
    first, second = sink.deliveries
    assert abs(first.at - sent[0]) < 0.05
    assert sent[1] < stalled_until - 0.2  # sent well inside the stall
    assert abs(second.at - sent[1]) < 0.05, (second.at - sent[1], stalled_until - sent[1])


def _request_on_a_new_connection(port: int, sent: list[float]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent.append(time.time())
        head = b"POST /t/new HTTP/1.1\r\nHost: x\r\nwebhook-id: n\r\nContent-Length: 2\r\n"
        sock.sendall(head + b"\r\n{}")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")


async def test_the_first_request_of_a_connection_not_yet_accepted_is_stamped_on_arrival() -> None:
    # A worker's first requests go on new connections, which a stalled sink accepts late. The
    # kernel stamps a packet only while some socket asks for stamps: asked only on the accepted
    # socket, a first request that came before the accept was stamped at the read, a stall
    # late, and a sliding window starting there held one lane more than the worker sent (CI saw
    # 152 at 150 QPS). The listener asks before it listens (emq.rigs.stamped).
    sent: list[float] = []
    async with Sink().serving() as sink:
        thread = threading.Thread(target=_request_on_a_new_connection, args=(sink.port, sent))
        thread.start()
        time.sleep(0.3)  # noqa: ASYNC251 (the point: the sink's loop stalls before the accept)
        stalled_until = time.time()
        assert await sink.wait_for(lambda: len(sink.deliveries) == 1, 5)
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5)
    (delivery,) = sink.deliveries
    assert sent[0] < stalled_until - 0.2  # sent well inside the stall
    assert abs(delivery.at - sent[0]) < 0.05, (delivery.at - sent[0], stalled_until - sent[0])


async def test_a_hung_request_is_held_until_the_client_gives_up_or_the_sink_ends() -> None:
    async with Sink().serving() as sink, aiohttp.ClientSession() as session:
        sink.behaviour["stuck"].hang = True
        gives_up = aiohttp.ClientTimeout(total=0.3)
        with pytest.raises(asyncio.TimeoutError):
            await session.post(sink.url("stuck"), data=b"{}", timeout=gives_up)
        assert await sink.wait_for(lambda: sink.hanging_now == 0, 5)
        waiting = asyncio.create_task(_post(session, sink.url("stuck"), "held"))
        assert await sink.wait_for(lambda: sink.hanging_now == 1, 5)
        assert await sink.wait_for(lambda: sink.max_hanging == 1, 5)  # (counted settled)
        assert not waiting.done()
        sink.release_hung()  # what the end of serving() does too
        assert await waiting == (200, None)
    assert [d.job_id for d in sink.deliveries] == ["held"]


async def test_the_sink_process_starts_counts_and_stops(tmp_path: Path) -> None:
    async with (
        SinkProcess.running(free_port(), tmp_path / "sink.log") as sink,
        aiohttp.ClientSession() as session,
    ):
        assert await _post(session, f"{sink.base}/t/a", "x") == (200, None)
        stats = await sink.get("/_stats")
        assert stats["requests"] == 1 and list(stats["per_second"]) == ["a"]
        pid = sink.pid
    assert not sink.proc.alive and pid > 0


def test_a_proc_is_started_checked_and_stopped(tmp_path: Path) -> None:
    served = Proc(
        "server", ["--bind", "127.0.0.1", "0"], None, tmp_path / "s.log", module="http.server"
    )
    quick = Proc("quick", ["--help"], None, tmp_path / "q.log", module="json.tool")
    assert quick.wait(30) == 0 and "usage" in quick.log()
    assert served.alive
    served.check()  # still running: no error
    stop_all([served, quick], timeout_s=10)
    assert served.proc is not None and served.proc.returncode == -signal.SIGTERM
    failed = Proc("bad", ["--no-such-flag"], None, tmp_path / "b.log", module="json.tool")
    failed.wait(30)
    with pytest.raises(EmqError, match="bad exited with 2"):
        failed.check()
    assert sys.executable in failed.argv


async def test_the_limit_path_answers_429_above_n_in_a_sliding_second() -> None:
    async with Sink(record=True).serving() as sink, aiohttp.ClientSession() as session:
        url = f"{sink.base}/limit/3/a"
        statuses = [(await _post(session, url, f"j{i}"))[0] for i in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        assert sink.stats.throttled["a"] == 2 and sum(sink.stats.per_second["a"].values()) == 3
        assert [row[3] for row in sink.stats.log] == statuses  # logged with what it answered
        assert (await _post(session, url, "j5"))[1] is None  # no Retry-After unless asked
        assert await _post(session, f"{sink.base}/limit/3/b?ra=1", "j6") == (200, None)
        held = [await _post(session, f"{sink.base}/limit/0/c?ra=1", "j7")]
        assert held == [(429, "1")]
