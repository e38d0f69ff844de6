"""``emq bench push-clients``: the HTTP client candidates of the push path, in one run, against
one sink process.

Each candidate (:mod:`emq.bench.push_client_run`: ``raw`` asyncio, the ``lean`` executor,
tuned ``aiohttp``, ``pycurl`` multi, ``pyreqwest``) runs in its own process for
``--duration-s`` seconds, ``rounds`` times in turn (raw, lean, aiohttp, pycurl, pyreqwest,
raw, lean, ...), so that whatever else the shared machine runs weighs on all alike; each
client's best round counts. Figures: requests/s and the client's CPU µs per request, and both
as ratios to tuned aiohttp in the same run. The sink (one process, one core) is the same for
all: a client faster than the sink shows the sink's rate, so compare CPU per request, which
does not depend on it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import uvloop

from emq.bench.harness import CpuMeter, json_of, share
from emq.bench.machine import describe
from emq.bench.push_client_run import CLIENTS
from emq.core.errors import EmqError
from emq.rigs.procs import SinkProcess
from emq.stack import free_port

TOPICS = 1000
ROUNDS = 2


async def client_run(sink: SinkProcess, client: str, concurrency: int, duration_s: float) -> Any:
    """One run of ``client`` against ``sink`` in its own process (also W2's raw ceiling)."""
    await sink.get("/_reset")
    meter = CpuMeter({"sink": sink.pid}).start()
    found, why = await json_of(
        "emq.bench.push_client_run", client, sink.base,
        "--topics", str(TOPICS), "--concurrency", str(concurrency),
        "--duration-s", str(duration_s), timeout_s=duration_s + 60,
    )  # fmt: skip
    if found is None:
        return {"client": client, "failed": why}
    result: dict[str, Any] = found
    result["sink_cpu_pct_of_core"] = share(meter.read())["sink"]
    return result


def _best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in rounds if "requests_per_s" in r]
    if not measured:
        return rounds[-1]
    best = max(measured, key=lambda r: r["requests_per_s"])
    return {**best, "rounds_requests_per_s": [r["requests_per_s"] for r in measured]}


def add_ratios(best: dict[str, dict[str, Any]]) -> None:
    """Each measured client's rate and CPU per request as multiples of tuned aiohttp's."""
    base = best.get("aiohttp", {})
    for figures in best.values():
        if "requests_per_s" not in figures or "requests_per_s" not in base:
            continue
        figures["vs_aiohttp_requests"] = round(
            figures["requests_per_s"] / base["requests_per_s"], 2
        )
        figures["vs_aiohttp_cpu"] = round(
            figures["cpu_us_per_request"] / base["cpu_us_per_request"], 2
        )


async def run_async(concurrency: int, duration_s: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="emq-bench-clients-") as tmp:
        async with SinkProcess.running(free_port(), Path(tmp) / "sink.log") as sink:
            runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
            for _ in range(rounds):
                for client in CLIENTS:
                    runs[client].append(await client_run(sink, client, concurrency, duration_s))
    best = {client: _best(r) for client, r in runs.items()}
    add_ratios(best)
    return {
        "bench": "push-clients",
        "concurrency": concurrency,
        "duration_s": duration_s,
        "rounds": rounds,
        "topics": TOPICS,
        "clients": best,
        "machine": describe(),
    }


def run(concurrency: int = 64, duration_s: float = 3.0, rounds: int = ROUNDS) -> dict[str, Any]:
    if duration_s <= 0:
        raise EmqError("--duration-s must be greater than 0")
    if concurrency < 1:
        raise EmqError("--concurrency must be at least 1")
    return uvloop.run(run_async(concurrency, duration_s, rounds))


def summary(doc: dict[str, Any]) -> str:
    lines = [f"push clients, {doc['concurrency']} requests at once, best of {doc['rounds']}:"]
    for client, r in doc["clients"].items():
        if "requests_per_s" in r:
            lines.append(
                f"  {client:<10} {r['requests_per_s']:>9} req/s  {r['cpu_us_per_request']:>6} µs"
                f" CPU/request  (x{r.get('vs_aiohttp_requests', '-')} aiohttp's rate,"
                f" x{r.get('vs_aiohttp_cpu', '-')} its CPU)"
            )
        else:
            lines.append(f"  {client:<10} {r.get('unavailable') or r.get('failed')}")
    return "\n".join(lines)
