"""``emq bench all``: every part runs for real (shortened), and the one document and its README
table carry every figure with its target. A benchmark, not a timed test: no figure is asserted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emq.bench import dispatch, enqueue, suite
from spark import bench as plan_bench
from tests.bench.cli import bench_error

# No figure is judged, so it runs in `make test`'s parallel pass; the suite (Spark, the API, a
# worker) takes about a minute alone and more beside other tests: a longer bound than 120 s.
pytestmark = pytest.mark.timeout(420)
FLEET_GROUPS = 2_000


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
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
    assert doc["results"]["plan"]["plan"]["rows"] == suite.MIN_ROWS
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


def test_bad_arguments_fail_at_once_with_one_line() -> None:
    for args in (["--rows", "5"], ["--duration-s", "0"]):
        assert bench_error("all", *args).startswith("emq: error: --")
