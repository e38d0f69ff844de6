"""``emq bench dispatch --redis-rtt-ms 0.5,2``: the worker's workloads, Redis a network hop away.

These machines' kernel has no ``tc netem``, so the hop is a delaying TCP proxy
(:mod:`emq.rigs.netdelay`) in its own process: the worker (and W8's API) dial it, it adds half the
round-trip time each way, and the benchmark's own clients (loading jobs, reading Redis) dial Redis
directly. Every workload asked for runs once per link, in this order: Redis directly, the proxy at
0 ms (its own cost, and the hop through one more process), then each round-trip time given.

``--workload all`` here means the workloads a hop changes: W2 (throughput: the worker's best of
two runs; the HTTP client's ceiling does not touch Redis, so it is not run), W3 (the quota in every
sliding second, from the sink's arrival stamps), W5 (latency of high-priority jobs) and paced
(:mod:`.workloads_paced`: by default :data:`PACED`, 100 topics at quota 10, unless ``--topics`` /
``--quota`` say otherwise; the sink records, so each case also has its topics' busiest sliding
second). Each result carries ``redis_link`` (the round-trip time, and the proxy's CPU over the
workload); W2's also the proxy's CPU per job, each paced case the proxy's CPU-s per 1000 jobs.
``network`` compares the links against the issue's targets:

* W2 jobs/s at every round-trip time within 10 % of Redis directly;
* W5's p99 at most ``3 x rtt + 20`` ms;
* W3's busiest sliding second and sustained rate as without the hop (its own targets);
* paced: delivered/s within :data:`PACED_WITHIN` of the quota sum (``topics x qps``: a backlog
  is always there), and no topic over its quota (``qps`` + 1 for its one group) in any sliding
  second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emq.bench.harness import Harness
from emq.bench.machine import describe
from emq.bench.workloads import SENDERS, TARGETS, W2_TOPICS, _w2_worker, judge
from emq.core.errors import EmqError

RUNS = ["W2", "W3", "W5", "paced"]
PACED = ((100,), (10,))  # the paced case behind a link unless --topics/--quota: (topics, quotas)
PACED_WITHIN = (0.95, 1.02)  # delivered/s over the quota sum
W2_WITHIN = 0.9  # of Redis directly's jobs/s
W5_RTT_FACTOR, W5_SLACK_MS = 3, 20.0


def parse_rtts(text: str) -> list[float]:
    """``"0.5,2"`` -> ``[0.5, 2.0]`` (milliseconds, each 0 to 1000)."""
    try:
        rtts = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise EmqError(f"--redis-rtt-ms takes milliseconds separated by commas: {text!r}") from None
    if not rtts or any(not 0 <= r <= 1000 for r in rtts):
        raise EmqError(f"--redis-rtt-ms takes milliseconds from 0 to 1000, got {text!r}")
    return rtts


def links(rtts: Sequence[float]) -> list[float | None]:
    """None (Redis directly), then the proxy at 0 ms, then each round-trip time once."""
    out: list[float | None] = [None, 0.0]
    return out + sorted({r for r in rtts if r > 0})


def plan(workload: str, noop: bool) -> list[str]:
    if noop:
        raise EmqError("--noop measures no Redis round trip: it does not take --redis-rtt-ms")
    return RUNS if workload == "all" else [workload]


def w5_bound_ms(rtt_ms: float | None) -> float:
    return W5_RTT_FACTOR * (rtt_ms or 0.0) + W5_SLACK_MS


async def w2(h: Harness, duration_s: float) -> dict[str, Any]:
    """W2 without the client ceilings: the worker's best of two runs."""
    jobs = int(15_000 * duration_s)
    runs = [await _w2_worker(h, jobs, SENDERS) for _ in range(2)]
    run = max(runs, key=lambda r: r["jobs_per_s"])
    result = judge("W2", {"ratio": 0.0, **run, "queues": 3 * len(W2_TOPICS)})
    result["worker_runs_jobs_per_s"] = [r["jobs_per_s"] for r in runs]
    del result["targets"]["ratio"], result["pass"]["ratio"], result["ratio"]
    return result


def label(rtt_ms: float | None) -> str:
    return "direct" if rtt_ms is None else f"proxy {rtt_ms:g} ms"


def report(workload: str, rtts: Sequence[float], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole document: every result, and ``network``: the links side by side, judged."""
    network = compare(results)
    return {
        "bench": "dispatch",
        "workload": workload,
        "redis_rtt_ms": list(rtts),
        "pass": all(network["pass"].values()),
        "network": network,
        "results": results,
        "machine": describe(),
    }


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    passed: dict[str, bool] = {}
    direct_w2 = next(
        (r["jobs_per_s"] for r in results if r["workload"] == "W2" and _rtt(r) is None), None
    )
    for r in results:
        rtt = _rtt(r)
        row = rows.setdefault(label(rtt), {"rtt_ms": rtt, "via_proxy": rtt is not None})
        row[f"{r['workload']}_proxy_cpu_pct_of_core"] = r["redis_link"]["proxy_cpu_pct_of_core"]
        if r["workload"] == "W2":
            row["W2_jobs_per_s"] = r["jobs_per_s"]
            row["W2_worker_cpu_us_per_job"] = r["worker_cpu_us_per_job"]
            row["W2_proxy_cpu_us_per_job"] = r.get("proxy_cpu_us_per_job")
            # the worker's serial reads (one in flight at a time) for the run's jobs
            row["W2_fetch_round_trips"] = r.get("worker_status", {}).get("fetch_round_trips")
            if direct_w2 and rtt is not None:
                row["W2_vs_direct"] = round(r["jobs_per_s"] / direct_w2, 3)
                passed[f"W2 {label(rtt)} >= {W2_WITHIN} x direct"] = (
                    row["W2_vs_direct"] >= W2_WITHIN
                )
        elif r["workload"] == "W5":
            row["W5_high_p99_ms"] = r["p99_ms"]
            row["W5_high_p99_bound_ms"] = w5_bound_ms(rtt)
            passed[f"W5 p99 {label(rtt)}"] = r["p99_ms"] <= w5_bound_ms(rtt)
        elif r["workload"] == "W3":
            row["W3_sliding_max"] = r["sliding_max"]
            row["W3_sustained_min"] = r["sustained_min"]
            for key in ("sliding_max", "sustained_min"):
                passed[f"W3 {key} {label(rtt)}"] = r["pass"][key]
        elif r["workload"] == "paced":
            row["paced"] = [paced_row(c) for c in r["cases"]]
            row["paced_w2_worker_cpu_us_per_job"] = r["w2_worker_cpu_us_per_job"]
            for case in row["paced"]:
                passed |= {f"{k} {label(rtt)}": ok for k, ok in paced_verdicts(case).items()}
    targets = {
        "W2": f"jobs/s >= {W2_WITHIN} x direct at every rtt",
        "W5": f"high p99 <= {W5_RTT_FACTOR} x rtt + {W5_SLACK_MS:g} ms",
        "W3": f"sliding_max {TARGETS['W3']['sliding_max'][0]} "
        f"{TARGETS['W3']['sliding_max'][1]:g}, sustained_min "
        f"{TARGETS['W3']['sustained_min'][0]} {TARGETS['W3']['sustained_min'][1]:g}",
        "paced": f"delivered/s {PACED_WITHIN[0]:g} to {PACED_WITHIN[1]:g} x topics x qps; "
        "every topic's busiest sliding second <= qps + 1",
    }
    return {"targets": targets, "pass": passed, "links": rows}


PACED_FIGURES = (
    "offered_per_s",
    "delivered_per_s",
    "worker_cpu_s_per_1000_jobs",
    "proxy_cpu_s_per_1000_jobs",
    "redis_commands_per_job",
    "wakeups_per_s",
    "sliding_max",
    "sustained_min",
    "cpu_ratio_to_w2",
)


def paced_row(case: dict[str, Any]) -> dict[str, Any]:
    """One paced case's figures on a link (``error`` if it measured nothing)."""
    row = {"case": f"{case['topics']}x{case['qps']}", "qps": case["qps"]}
    if "error" in case:
        return row | {"error": case["error"]}
    row |= {k: case.get(k) for k in PACED_FIGURES}
    row["delivered_vs_quota_sum"] = round(case["delivered_per_s"] / case["offered_per_s"], 3)
    # how long the worker waited for a CPU while runnable: a busy machine, not the link
    row["worker_runqueue_wait_pct"] = case.get("worker_runqueue_wait", {}).get("waited_pct")
    return row


def paced_verdicts(row: dict[str, Any]) -> dict[str, bool]:
    """The quota promise on one paced case (a :func:`paced_row`): the rate it sustained against
    the quota sum, and each topic's busiest sliding second against its limit (``qps`` + 1)."""
    low, high = PACED_WITHIN
    ratio, sliding = row.get("delivered_vs_quota_sum"), row.get("sliding_max")
    return {
        f"paced {row['case']} delivered/s vs quota sum": ratio is not None and low <= ratio <= high,
        f"paced {row['case']} sliding second": sliding is not None
        and round(sliding * row["qps"]) <= row["qps"] + 1,  # (a count of arrivals)
    }


def _rtt(result: dict[str, Any]) -> float | None:
    rtt: float | None = result["redis_link"]["rtt_ms"]
    return rtt


def summary(doc: dict[str, Any]) -> str:
    lines = ["per link (Redis directly, then through the delaying proxy):"]
    for name, row in doc["network"]["links"].items():
        shown = {k: v for k, v in row.items() if k not in ("rtt_ms", "via_proxy", "paced")}
        lines.append(f"  {name:<16} " + "  ".join(f"{k} {v}" for k, v in shown.items()))
        for case in row.get("paced", []):
            lines.append(f"  {'':<16} paced " + "  ".join(f"{k} {v}" for k, v in case.items()))
    for key, ok in doc["network"]["pass"].items():
        lines.append(f"  {key:<44} {'ok' if ok else 'MISSED'}")
    return "\n".join(lines)
