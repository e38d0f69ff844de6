"""``emq bench all``: every benchmark of EMQ in one run, as one JSON document and a markdown table.

The parts, each run as ``emq bench <name>`` runs it (its own servers on free loopback ports,
stopped afterwards) and each result carrying the machine's description:

* ``enqueue`` — the API's intake: jobs/s in batches of 1000, requests/s of single jobs;
* ``dispatch`` — the worker, workloads W2-W6, W6b and W2 ``--noop`` (:mod:`emq.bench.dispatch`);
* ``fleet`` — the assignment's maths at 20 000 groups over 1 000 workers
  (``emq fleet simulate``, no ZooKeeper: the figures are the algorithm's);
* ``plan`` — the Spark jobs over ``--rows`` rows of synthetic history (``spark/bench.py``).

:func:`table` turns the document into a markdown table (docs/benchmarks.md): one line per figure
with its target, the figure as measured and whether it was met. This machine class is shared and
noisy: run it when nothing else runs, and read the ``contention`` each dispatch result carries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from emq.bench.machine import describe

PARTS = ("enqueue", "dispatch", "fleet", "plan")
FLEET_GROUPS, FLEET_WORKERS = 20_000, 1_000
FLEET_TARGETS = {  # the fleet issue's
    "compute_s": 1.0,
    "max_over_mean": 1.10,
    "join_moved_x_ideal": 1.1,
    "leave_moved_x_ideal": 1.1,
}
MIN_ROWS = 7 * 1440  # the plan bench's history: topics x 7 days x 1-minute intervals


def run(
    duration_s: float = 10.0,
    rows: int = 10_000_000,
    parts: tuple[str, ...] = PARTS,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run ``parts`` in order; one document with every result, the machine and the table."""
    results: dict[str, Any] = {}
    started = time.monotonic()
    for part in parts:
        say(f"bench {part}...")
        t0 = time.monotonic()
        results[part] = _RUNS[part](duration_s, rows)
        say(f"bench {part}: {time.monotonic() - t0:.0f} s")
    doc: dict[str, Any] = {
        "bench": "all",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
    }
    lines = rows_of(doc)
    doc["pass"] = all(line[4] is not False for line in lines)
    doc["markdown"] = table(doc)
    return doc


def _enqueue(duration_s: float, rows: int) -> dict[str, Any]:
    from emq.bench import enqueue

    return enqueue.run(duration_s=duration_s)


def _dispatch(duration_s: float, rows: int) -> dict[str, Any]:
    from emq.bench import dispatch

    return dispatch.run("all", duration_s=duration_s)


def _fleet(
    duration_s: float, rows: int, groups: int = FLEET_GROUPS, workers: int = FLEET_WORKERS
) -> dict[str, Any]:
    from allocator.simulate import simulate

    return simulate(groups, workers) | {"bench": "fleet", "machine": describe()}


def _plan(duration_s: float, rows: int) -> dict[str, Any]:
    from spark.bench import run as run_plan

    return run_plan(rows=rows) | {"machine": describe()}


_RUNS: dict[str, Callable[[float, int], dict[str, Any]]] = {
    "enqueue": _enqueue,
    "dispatch": _dispatch,
    "fleet": _fleet,
    "plan": _plan,
}

# (part, workload or None, figure, label, target text, met(value) or None)
Line = tuple[str, str, Any, str, bool | None]


def _met(value: Any, op: str, bound: float) -> bool:
    return value >= bound if op == ">=" else value <= bound


def rows_of(doc: dict[str, Any]) -> list[Line]:
    """Each figure as (benchmark, figure, measured, target, met); met is None without a target."""
    r = doc["results"]
    out: list[Line] = []
    if "enqueue" in r:
        e = r["enqueue"]
        for key, label, unit in (
            ("jobs_per_s", "jobs/s, batches of 1000", ""),
            ("requests_per_s", "requests/s, single jobs, 64 in flight", ""),
            ("producer_send_loop_jobs_per_s", "jobs/s, producer.send() in a loop", ""),
        ):
            if key not in e:  # a result recorded before the producer loop was measured
                continue
            bound = e["targets"][key]
            out.append(("enqueue", label, f"{e[key]:,.0f}{unit}", f">= {bound:,}", e[key] >= bound))
        out.append(("enqueue", "p99 ms, single jobs", e["p99_ms"], "", None))
    if "dispatch" in r:
        for w in r["dispatch"]["results"]:
            name = w["workload"]
            for key, target in w["targets"].items():
                out.append((f"dispatch {name}", key, w[key], target, w["pass"][key]))
            for key in _DISPATCH_EXTRA.get(name, ()):
                out.append((f"dispatch {name}", key, w[key], "", None))
    if "fleet" in r:
        f = r["fleet"]
        label = f"{f['groups']:,} groups / {f['workers']:,} workers"
        for key, text in (
            ("compute_s", f"{label}: assignment s"),
            ("max_over_mean", "busiest / mean groups"),
            ("join_moved_x_ideal", "moved on a join, x ideal 1/N"),
            ("leave_moved_x_ideal", "moved on a leave, x ideal 1/N"),
        ):
            bound = FLEET_TARGETS[key]
            out.append(("fleet", text, f[key], f"<= {bound:g}", f[key] <= bound))
    if "plan" in r:
        p = r["plan"]
        rows = f"{p['rows'] / 1e6:.0f}M rows"
        target = p["target"]
        out += [
            ("plan", f"history synth, {rows}: s", p["synth"]["seconds"], "", None),
            ("plan", f"history synth, {rows}: rows/s", f"{p['synth']['rows_per_s']:,}", "", None),
            (
                "plan",
                f"plan run, {rows}: s (incl. Spark start-up)",
                p["plan"]["seconds"],
                f"<= {target['plan_seconds_max']:g} at 10M",
                target["met"] if p["rows"] >= target["for_rows"] else None,
            ),
            ("plan", f"plan run, {rows}: rows/s", f"{p['plan']['rows_per_s']:,}", "", None),
            (
                "plan",
                "plan run, 100M rows: s (estimate)",
                p["plan"]["estimate_100m_rows_s"],
                "",
                None,
            ),
        ]
    return out


_DISPATCH_EXTRA = {
    "W2": ("ceiling_requests_per_s", "worker_cpu_us_per_job"),
    "W4": ("idle_redis_ops_per_s", "active_cpu_pct_of_core"),
    "W5": ("p50_ms",),
    "W6": ("healthy_per_s",),
    "W6b": ("healthy_per_s", "slow_per_s"),
    "W7": ("many_groups_cpu_ratio",),
    "W8": ("worker_cpu_us_per_job", "w2_worker_cpu_us_per_job"),
}


def table(doc: dict[str, Any]) -> str:
    """The benchmark table in markdown: a heading line with date and machine, then the figures."""
    m = doc["machine"]
    head = (
        f"Measured {doc['date']} on {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, "
        f"Python {m['python']}, Redis {m['redis']}: `emq bench all --json`."
    )
    lines = [head, "", "| benchmark | figure | measured | target | met |", "|---|---|---|---|---|"]
    for part, label, value, target, met in rows_of(doc):
        verdict = "" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {part} | {label} | {value} | {target} | {verdict} |")
    return "\n".join(lines)
