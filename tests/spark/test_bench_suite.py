"""``emq bench all``: every part runs for real (shortened), and the one document and its README
table carry every figure with its target. A benchmark, not a timed test: no figure is asserted.

The plan part's two jobs (history synth, then the plan) run as ``spark/bench.py`` runs them,
with their command-line flags, ``--json`` output and timings, but on the Spark session the
Spark tests share instead of in a JVM each (a JVM's start costs more CPU than the job here).
Starting a job as a process of its own is tested with a job refused before Spark starts;
``tests/spark/test_cli.py`` submits ``plan_job.py`` to a cluster as a script.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from emq.bench import dispatch, enqueue, suite
from emq.core.errors import EmqError
from spark import bench as plan_bench
from spark import plan_job, synth_job

# No figure is judged, so it runs in `make test`'s parallel pass; the suite (the API, a worker,
# the plan jobs) takes about half a minute alone and more beside other tests.
pytestmark = pytest.mark.timeout(420)
FLEET_GROUPS = 2_000
JOBS = {"synth_job.py": synth_job.main, "plan_job.py": plan_job.main}


def _job_in_session(script: str, argv: list[str]) -> tuple[float, dict[str, Any]]:
    """``plan_bench._job`` on the active session: the script's ``main`` with the same flags."""
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = JOBS[script]([*argv, "--json", "--quiet"])
    assert code == 0, f"{script} {argv} exited {code}"
    return time.monotonic() - started, json.loads(out.getvalue())


@pytest.fixture(scope="module")
def doc(spark: SparkSession) -> dict[str, Any]:
    """The suite with each part shortened: 1 s runs, W5 alone, a small fleet, a one-topic plan."""
    runs = dict(suite._RUNS)
    shortened = {
        "enqueue": lambda d, r: enqueue.run(duration_s=1.0, producer_jobs=5_000),
        "dispatch": lambda d, r: {"results": [dispatch.run("W5", duration_s=1.0)]},
        # the full-size simulation has a test of its own (tests/allocator/test_simulate.py)
        "fleet": lambda d, r: suite._fleet(d, r, groups=FLEET_GROUPS, workers=100),
        "plan": lambda d, r: plan_bench.run(rows=suite.MIN_ROWS, jit="quick") | {"machine": {}},
    }
    suite._RUNS.update(shortened)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(plan_bench, "_job", _job_in_session)
            return suite.run(duration_s=1.0, rows=suite.MIN_ROWS)
    finally:
        suite._RUNS.update(runs)


def test_one_document_holds_every_part_with_the_machine(doc: dict[str, Any]) -> None:
    assert doc["bench"] == "all" and set(doc["results"]) == set(suite.PARTS)
    assert doc["machine"]["cores"] >= 1 and doc["date"].count("-") == 2
    assert doc["results"]["enqueue"]["jobs_per_s"] > 0
    assert doc["results"]["enqueue"]["producer_send_loop_jobs_per_s"] > 0
    assert doc["results"]["dispatch"]["results"][0]["samples"] > 0
    assert doc["results"]["fleet"]["groups"] == FLEET_GROUPS
    plan = doc["results"]["plan"]
    assert plan["plan"]["rows"] == plan["synth"]["rows"] == suite.MIN_ROWS
    assert plan["topics"] == 1 and plan["fleet"]["workers"] >= 1
    assert set(plan["plan"]["steps_s"]) >= {"starting Spark", "reading history"}
    json.dumps(doc)  # one JSON document


def test_the_table_has_a_line_per_figure_with_its_verdict(doc: dict[str, Any]) -> None:
    lines = doc["markdown"].splitlines()
    assert lines[0].startswith(f"Measured {doc['date']} on ")
    assert lines[2] == "| benchmark | figure | measured | target | met |"
    body = lines[4:]
    assert len(body) == len(suite.rows_of(doc))
    by_part = {line.split(" | ")[0].lstrip("| ") for line in body}
    assert by_part == {"enqueue", "dispatch W5", "fleet", "plan"}
    p99 = next(line for line in body if "| p99_ms |" in line)
    met = doc["results"]["dispatch"]["results"][0]["pass"]["p99_ms"]
    assert p99.endswith("| yes |" if met else "| **no** |") and "<= 20" in p99
    verdicts = [met for *_, met in suite.rows_of(doc) if met is not None]
    assert doc["pass"] == all(verdicts)


def test_a_job_that_fails_in_its_process_is_one_error_with_its_last_line(tmp_path: Path) -> None:
    """``plan_bench._job`` as the bench runs it: ``spark/synth_job.py`` started as a script of
    its own (refused here before Spark starts), its last line of stderr in the error."""
    argv = ["--out", str(tmp_path / "h"), "--topics", "0", "--days", "7"]
    with pytest.raises(EmqError, match=r"synth_job.py failed with 1: synth_job: error: .*topics"):
        plan_bench._job("synth_job.py", argv)
    assert not (tmp_path / "h").exists()
