"""``emq bench plan``: rows/s and wall time of the synthetic-history job and the sizing job.

Each job runs in its own process, as a user runs it, so the wall time includes starting Python,
the JVM and Spark. Besides wall time it reports the CPU seconds the JVM used (``cpu_s``), which
unlike wall time does not grow when other processes share the machine, and the load average
before and after. The history is ``rows / 10 080`` topics x 7 days x 1-minute intervals in a
temporary directory (removed afterwards). The figure for 100M rows is extrapolated from the
measured run: start-up once, the rest in proportion to rows (state it as an estimate).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emq.core.errors import EmqError

HERE = Path(__file__).resolve().parent
DAYS = 7
INTERVAL_S = 60
PER_TOPIC = DAYS * 86_400 // INTERVAL_S  # 10 080 rows per topic
PLAN_TARGET_S = 60.0
TARGET_ROWS = 10_000_000
ESTIMATE_ROWS = 100_000_000


def _job(script: str, argv: list[str]) -> tuple[float, dict[str, Any]]:
    """Run ``spark/<script>`` with ``argv``; its wall time and its JSON output."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *argv, "--json", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EmqError(f"{script} failed with {proc.returncode}: {tail}")
    return elapsed, json.loads(proc.stdout)


def _phase(rows: int, seconds: float, startup_s: float) -> dict[str, Any]:
    work = max(0.001, seconds - startup_s)
    return {
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "startup_s": round(startup_s, 2),
        "rows_per_s_after_startup": round(rows / work),
        f"estimate_{ESTIMATE_ROWS // 1_000_000}m_rows_s": round(
            startup_s + work * ESTIMATE_ROWS / rows, 1
        ),
    }


def run(
    rows: int = TARGET_ROWS,
    driver_memory: str = "4g",
    keep: str | None = None,
    jit: str = "full",
) -> dict[str, Any]:
    """Synthesise about ``rows`` rows, plan over them, and report both timings."""
    if rows < PER_TOPIC:
        raise EmqError(f"--rows must be at least {PER_TOPIC} (one topic-week of minutes)")
    topics = max(1, math.ceil(rows / PER_TOPIC))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="emq-bench-plan-") as tmp:
        history = keep or str(Path(tmp) / "history")
        synth_s, synth = _job(
            "synth_job.py",
            [
                "--out",
                history,
                "--topics",
                str(topics),
                "--days",
                str(DAYS),
                "--start",
                "2025-01-06",
                "--seed",
                "7",
                "--overwrite",
                "--driver-memory",
                driver_memory,
                "--jit",  # millions of rows: the optimising compiler pays (and the figures
                jit,  # stay comparable with earlier runs)
            ],
        )
        plan_s, plan = _job(
            "plan_job.py",
            [
                "--history",
                history,
                "--out",
                str(Path(tmp) / "plan"),
                "--driver-memory",
                driver_memory,
                "--jit",  # millions of rows: the optimising compiler pays (and the figures
                jit,  # stay comparable with earlier runs)
            ],
        )
    total = synth["rows"]
    plan_start = float(plan["timings_s"].get("starting Spark", 0.0))
    synth_start = max(0.0, synth_s - float(synth["seconds"]))
    return {
        "name": "plan",
        "rows": total,
        "topics": topics,
        "days": DAYS,
        "interval_s": INTERVAL_S,
        "synth": _phase(total, synth_s, synth_start) | {"cpu_s": synth.get("cpu_s", {}).get("jvm")},
        "plan": _phase(total, plan_s, plan_start)
        | {
            "steps_s": plan["timings_s"],
            "cpu_s": plan.get("cpu_s", {}).get("jvm"),
            "steps_cpu_s": plan.get("step_cpu_s"),
        },
        "target": {
            "plan_seconds_max": PLAN_TARGET_S,
            "for_rows": TARGET_ROWS,
            "met": plan_s <= PLAN_TARGET_S * max(1.0, total / TARGET_ROWS),
        },
        "fleet": {k: plan["fleet"][k] for k in ("workers", "redis_shards", "peak_offered_rps")},
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
    }
