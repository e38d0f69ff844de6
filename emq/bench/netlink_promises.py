"""``emq bench promises --redis-rtt-ms 0.5,2``: the mixed, hostile workloads, Redis a hop away.

The same seeds as ``emq bench promises`` (:mod:`emq.bench.mixed`: keys, priorities, delays,
floods, failing, hanging and slow endpoints, live quota changes, a worker killed), run once per
round-trip time given, in increasing order, with the workers and the API reaching Redis through
the delaying proxy (:mod:`emq.rigs.netdelay`, as ``emq bench dispatch --redis-rtt-ms`` uses it)
while the bench's own clients (enqueuing, reading the dead-letter queues, the judges) dial Redis
directly. A round-trip time of 0 runs the bare proxy. Redis directly is ``emq bench promises``
without the flag.

The document has, per link (``links``, keyed ``proxy <rtt> ms``), what ``emq bench promises``
reports (worst figure and verdict per promise, every seed's figures), each seed with
``redis_link``: the connections the proxy relayed and its CPU over the run; ``pass`` holds the
verdicts per link and ``ok`` is whether every link kept every promise.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from emq.bench import mixed, promises
from emq.bench.machine import describe
from emq.bench.netlink import label


def rtts_to_run(rtts: Sequence[float]) -> list[float]:
    """Each round-trip time once, in increasing order (0: the bare proxy, only if asked)."""
    return sorted(set(rtts))


def combine(
    rtts: Sequence[float], docs: Sequence[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    """One document from ``emq bench promises``'s document of each link (``docs``, in the order
    of ``rtts``)."""
    links = {
        label(rtt): {"rtt_ms": rtt} | {k: v for k, v in doc.items() if k not in _SHARED}
        for rtt, doc in zip(rtts, docs, strict=True)
    }
    return {
        "bench": "promises",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "seconds": round(seconds, 1),
        "redis_rtt_ms": list(rtts),
        "bounds": {k: f"{op} {b:g}" for k, (op, b) in promises.BOUNDS.items()},
        "pass": {name: link["pass"] for name, link in links.items()},
        "ok": all(link["ok"] for link in links.values()),
        "links": links,
    }


_SHARED = ("bench", "date", "machine", "bounds")  # the same for every link: once, at the top


def run_cli(
    seeds: int,
    duration_s: float | None,
    rtts: Sequence[float],
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Seeds ``1..seeds`` at each round-trip time; bad values are one EmqError line each."""
    duration_s = mixed.seeded_arguments(seeds, duration_s, default_s=30.0, min_s=5.0)
    started = time.monotonic()
    order = rtts_to_run(rtts)
    docs = []
    for rtt in order:
        tell = functools.partial(_tell, say, label(rtt))
        docs.append(mixed.run(range(1, seeds + 1), duration_s, say=tell, redis_rtt_ms=rtt))
    return combine(order, docs, time.monotonic() - started)


def _tell(say: Callable[[str], None], link: str, text: str) -> None:
    say(f"{link}: {text}")


def summary(doc: dict[str, Any]) -> str:
    """Per link: the proxy's share of the run, then ``emq bench promises``'s table."""
    lines = []
    for name, link in doc["links"].items():
        carried = [
            f"seed {r['seed']}: {r['redis_link']['proxy_connections']} connections, "
            f"{r['redis_link']['proxy_cpu_pct_of_core']}% of a core"
            for r in link["seeds"]
            if "redis_link" in r
        ]
        verdict = "every promise kept" if link["ok"] else "a promise BROKEN (or a seed failed)"
        lines += [f"Redis through the {name}: {verdict}", "proxy " + "; ".join(carried)]
        lines += [mixed.summary(link | {"bounds": doc["bounds"]}), ""]
    return "\n".join(lines).rstrip()
