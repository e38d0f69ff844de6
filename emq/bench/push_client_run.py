"""One HTTP client candidate against the benchmark sink, in its own process (its CPU its own).

    python -m emq.bench.push_client_run CLIENT BASE_URL --topics N --concurrency C --duration-s D

Prints one JSON object: requests answered 200 per second and the process's CPU per request
(``time.process_time``: every thread, so a client that works on threads of its own, as
pyreqwest's Rust runtime does, pays for them). Every client sends the same request: a
``POST`` of the same small body to ``/t/cNNNNN`` (``--topics`` paths in turn), over keep-alive
connections, ``--concurrency`` requests at once, after half a second of warm-up.

* ``aiohttp``: the tuned W2 ceiling client (:mod:`emq.bench.ceiling`);
* ``lean``: the worker's lean executor (:class:`worker.http1.LeanPusher`), through the
  ``Pusher`` interface exactly as the worker calls it (URL checks, timeouts, pool);
* ``raw``: the floor of asyncio itself: one protocol per connection writing a prepared request
  and counting answers (``Content-Length: 0``, as the sink answers) in ``data_received``, no
  coroutine per request: what no client on this event loop can beat;
* ``pycurl``: libcurl's multi interface, driven by its own ``perform``/``select`` loop (an
  asyncio integration would only add to its cost);
* ``pyreqwest``: the Rust reqwest client's asyncio binding.

A client whose package is not installed reports ``unavailable`` with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import ipaddress
import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import uvloop

from worker.main import tune_gc

BODY = b'{"bench":true,"n":1}'
WARM_S = 0.5
Send = Callable[[str], Awaitable[bool]]


def _figures(ok: int, failed: int, elapsed: float, cpu: float) -> dict[str, Any]:
    return {
        "requests": ok,
        "failed_requests": failed,
        "seconds": round(elapsed, 3),
        "requests_per_s": round(ok / elapsed, 1) if elapsed > 0 else 0.0,
        "cpu_us_per_request": round(cpu / max(1, ok) * 1e6, 1),
    }


async def _drive(send: Send, urls: Iterator[str], concurrency: int, duration_s: float) -> Any:
    """``concurrency`` sender coroutines calling ``send``: warm-up, then the counted window."""
    counts = [0, 0]

    async def sender(until: float, count: bool) -> None:
        while time.perf_counter() < until:
            ok = await send(next(urls))
            if count:
                counts[0 if ok else 1] += 1

    warm = time.perf_counter() + WARM_S
    await asyncio.gather(*(sender(warm, False) for _ in range(concurrency)))
    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(sender(start + duration_s, True) for _ in range(concurrency)))
    return _figures(counts[0], counts[1], time.perf_counter() - start, time.process_time() - cpu)


async def run_aiohttp(base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    from emq.bench import ceiling

    return await ceiling.run(base, topics, concurrency, duration_s)


async def run_lean(base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    from emq.core.interfaces import PushRequest
    from worker.http1 import LeanPusher
    from worker.settings import WorkerSettings
    from worker.ssrf import AddressPolicy

    policy = AddressPolicy([ipaddress.ip_network("127.0.0.0/8")])
    urls = itertools.cycle([f"{base}/t/c{i:05d}" for i in range(topics)])
    async with LeanPusher(WorkerSettings(), policy) as pusher:

        async def send(url: str) -> bool:
            result = await pusher.push(PushRequest(url, "POST", {}, BODY, "bench"))
            return result.status == 200

        return await _drive(send, urls, concurrency, duration_s)


class _RawConnection(asyncio.Protocol):
    """Writes the next prepared request as soon as the previous answer's head has arrived."""

    def __init__(self, requests: Iterator[bytes], counts: list[int]) -> None:
        self.requests = requests
        self.counts = counts
        self.buffer = b""
        self.transport: Any = None
        self.counting = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(next(self.requests))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:  # the sink answers "Content-Length: 0"
            head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            if self.counting:
                self.counts[0 if head.startswith(b"HTTP/1.1 200") else 1] += 1
            self.transport.write(next(self.requests))


async def run_raw(base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = f"Host: {host}:{port}\r\nContent-Length: {len(BODY)}\r\n\r\n".encode() + BODY
    requests = itertools.cycle([b"POST /t/c%05d HTTP/1.1\r\n" % i + head for i in range(topics)])
    loop = asyncio.get_running_loop()
    counts = [0, 0]
    conns = [
        (await loop.create_connection(lambda: _RawConnection(requests, counts), host, port))[1]
        for _ in range(concurrency)
    ]
    await asyncio.sleep(WARM_S)
    start, cpu = time.perf_counter(), time.process_time()
    for c in conns:
        c.counting = True
    await asyncio.sleep(duration_s)
    for c in conns:
        c.counting = False
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for c in conns:
        c.transport.close()
    return _figures(counts[0], counts[1], elapsed, cpu)


async def run_pyreqwest(base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    # (optional packages, imported by name: the layering test preloads every static import)
    ClientBuilder = importlib.import_module("pyreqwest.client").ClientBuilder

    urls = itertools.cycle([f"{base}/t/c{i:05d}" for i in range(topics)])
    builder = ClientBuilder().follow_redirects(False).http1_only().gzip(False)
    async with builder.build() as client:

        async def send(url: str) -> bool:
            response = await client.post(url).body_bytes(BODY).build().send()
            await response.bytes()
            return bool(response.status == 200)

        return await _drive(send, urls, concurrency, duration_s)


def run_pycurl(base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    pycurl = importlib.import_module("pycurl")

    urls = itertools.cycle([f"{base}/t/c{i:05d}" for i in range(topics)])
    multi = pycurl.CurlMulti()
    handles = []
    for _ in range(concurrency):
        c = pycurl.Curl()
        c.setopt(pycurl.POSTFIELDS, BODY)
        c.setopt(pycurl.WRITEFUNCTION, lambda data: None)
        c.setopt(pycurl.FOLLOWLOCATION, 0)
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.HTTPHEADER, ["Expect:"])
        c.setopt(pycurl.URL, next(urls))
        multi.add_handle(c)
        handles.append(c)
    counts = [0, 0]

    def loop(until: float, count: bool) -> None:
        while time.perf_counter() < until:
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            _, done, failed = multi.info_read()
            for c in done:
                if count:
                    counts[0 if c.getinfo(pycurl.RESPONSE_CODE) == 200 else 1] += 1
                multi.remove_handle(c)
                c.setopt(pycurl.URL, next(urls))
                multi.add_handle(c)
            for c, _, _ in failed:
                counts[1] += count
                multi.remove_handle(c)
                multi.add_handle(c)
            multi.select(0.1)

    loop(time.perf_counter() + WARM_S, False)
    start, cpu = time.perf_counter(), time.process_time()
    loop(start + duration_s, True)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for c in handles:
        multi.remove_handle(c)
        c.close()
    multi.close()
    return _figures(counts[0], counts[1], elapsed, cpu)


ASYNC_CLIENTS = {
    "aiohttp": run_aiohttp,
    "lean": run_lean,
    "raw": run_raw,
    "pyreqwest": run_pyreqwest,
}
CLIENTS = ("raw", "lean", "aiohttp", "pycurl", "pyreqwest")
PACKAGES = {"pycurl": "pycurl", "pyreqwest": "pyreqwest"}


def run(client: str, base: str, topics: int, concurrency: int, duration_s: float) -> Any:
    """One client's figures, or ``{"unavailable": why}`` if its package is not installed."""
    if client in PACKAGES:
        try:
            importlib.import_module(PACKAGES[client])
        except ImportError as e:
            return {"unavailable": f"not installed ({e}): pip install 'emq[bench]'"}
    if client == "pycurl":
        return run_pycurl(base, topics, concurrency, duration_s)
    return uvloop.run(ASYNC_CLIENTS[client](base, topics, concurrency, duration_s))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.push_client_run")
    p.add_argument("client", choices=CLIENTS)
    p.add_argument("base", help="the sink's base URL (http://127.0.0.1:PORT)")
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--duration-s", type=float, default=3.0)
    a = p.parse_args()
    tune_gc()
    result = run(a.client, a.base, a.topics, a.concurrency, a.duration_s)
    json.dump({"client": a.client, "concurrency": a.concurrency, **result}, sys.stdout)


if __name__ == "__main__":
    main()
