"""``emq history synth`` and ``emq plan run`` as users run them, and spark-submit to a standalone
cluster (a master and two workers started here)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from emq.cli.main import main
from emq.rigs.spark_cluster import SparkCluster
from spark.session import _submitted_locally, local_partitions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def history(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "history"
    argv = ["history", "synth", "--out", str(out), "--topics", "20", "--days", "2"]
    argv += ["--interval-s", "3600", "--seed", "2", "--start", "2025-01-06", "--quiet"]
    assert main(argv) == 0
    return out


def test_synth_prints_what_it_wrote(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["history", "synth", "--out", str(tmp_path / "h"), "--topics", "3", "--days", "1"]
    assert main([*argv, "--interval-s", "3600", "--start", "2025-01-06", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert (result["rows"], result["topics"], result["start"]) == (72, 3, "2025-01-06")
    assert "[2/2] writing 72 rows" in captured.err


def test_plan_run_shows_progress_and_a_summary(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    argv = ["plan", "run", "--history", str(history), "--out", str(out), "--worker-qps", "250"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    for step in ("[2/6] reading history", "[5/6] quota dry-run", "[6/6] writing plan.json"):
        assert step in captured.err
    assert "20 topics" in captured.out and "at 250 jobs/s each" in captured.out
    assert {"plan.json", "report.html", "topics.parquet", "fleet.parquet"} <= {
        p.name for p in out.iterdir()
    }


@pytest.fixture(scope="module")
def json_plan(history: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``emq plan run --json`` with the per-worker capacity from a benchmark's output: the
    summary, and the flags (the cluster test plans the same history with them)."""
    base = tmp_path_factory.mktemp("json-plan")
    bench = base / "bench.json"
    bench.write_text(json.dumps({"name": "dispatch", "result": {"delivered_per_s": 4321.0}}))
    flags = ["--history", str(history), "--headroom", "1.5", "--worker-bench", str(bench)]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["plan", "run", *flags, "--out", str(base / "p"), "--quiet", "--json"]) == 0
    return {"flags": flags, "summary": json.loads(out.getvalue())}


def test_plan_run_json_takes_the_worker_capacity_from_a_benchmark(
    json_plan: dict[str, Any],
) -> None:
    result = json_plan["summary"]
    assert result["topics"] == 20 and result["fleet"]["worker_qps"] == 4321.0
    assert "bench.json" in result["fleet"]["worker_qps_source"]
    plan = json.loads(Path(result["plan"]).read_text())
    assert plan["parameters"]["headroom"] == 1.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "run", "--history", "{h}", "--out", "{o}", "--headroom", "0"], "--headroom"),
        (["plan", "run", "--history", "{o}/nothing", "--out", "{o}"], "does not exist"),
        (["history", "synth", "--out", "{o}/s", "--topics", "0", "--days", "1"], "--topics"),
        (
            [
                "history",
                "synth",
                "--out",
                "{o}/s",
                "--topics",
                "1",
                "--days",
                "1",
                "--start",
                "Jan 6",
            ],
            "YYYY-MM-DD",
        ),
    ],
)
def test_bad_input_is_one_line(
    history: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    filled = [a.format(h=history, o=tmp_path) for a in argv]
    assert main(filled) == 1
    err = capsys.readouterr().err
    assert err.startswith("emq: error:") and message in err and err.count("\n") == 1


@pytest.mark.timeout(300)  # six JVMs: a master, two workers, a driver, two executors
def test_spark_submit_runs_the_job_on_a_standalone_cluster(
    json_plan: dict[str, Any], spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """``spark-submit --master spark://...``: the application runs on the cluster, with an
    executor on each worker, and plans exactly what local mode plans from the same history."""
    submit = Path(sys.executable).with_name("spark-submit")
    if not submit.exists():
        submit = Path(shutil.which("spark-submit") or "spark-submit")
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_CONF_DIR=str(spark_cluster.conf_dir),  # sized to the cluster, quiet logs
    )
    done = subprocess.run(
        [
            str(submit),
            "--master",
            spark_cluster.master_url,
            "--driver-java-options",  # a short job: the JVM's quick compiler (spark/README.md)
            "-XX:TieredStopAtLevel=1",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            str(ROOT / "spark" / "plan_job.py"),
            *json_plan["flags"],
            "--out",
            str(tmp_path / "cluster"),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:] + spark_cluster.logs()
    summary = json.loads(done.stdout)
    app = summary["spark"]["application_id"]
    assert summary["spark"]["master"] == spark_cluster.master_url
    assert summary["shuffle_partitions"] == 4  # the submitter's setting, not a local run's
    finished = {a["id"]: a for a in spark_cluster.state()["completedapps"]}
    assert finished[app]["name"] == "emq-plan" and finished[app]["state"] == "FINISHED"
    ran_on = [
        [e["id"] for e in w["finishedexecutors"] if e["appid"] == app]
        for w in spark_cluster.worker_states()
    ]
    assert [len(executors) for executors in ran_on] == [1, 1], ran_on
    cluster_plan, local_plan = (
        json.loads(Path(path).read_text())
        for path in (summary["plan"], json_plan["summary"]["plan"])
    )
    for plan in (cluster_plan, local_plan):
        del plan["generated_at"]
    series = cluster_plan.pop("series"), local_plan.pop("series")
    assert cluster_plan == local_plan
    # The fleet's series add up every topic's rates: in another partitioning, another order.
    on_cluster, local = (_leaves(s) for s in series)
    floats = {path for path, value in local.items() if isinstance(value, float)}
    assert {p: v for p, v in on_cluster.items() if p not in floats} == {
        p: v for p, v in local.items() if p not in floats
    }
    assert {p: on_cluster[p] for p in floats} == pytest.approx({p: local[p] for p in floats})
    assert cluster_plan["history"]["topics"] == 20


def _leaves(document: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON document by its path (pytest.approx compares flat mappings)."""
    if isinstance(document, dict):
        items = document.items()
    elif isinstance(document, list):
        items = enumerate(document)  # type: ignore[assignment]
    else:
        return {path: document}
    return {k: v for key, value in items for k, v in _leaves(value, f"{path}/{key}").items()}


def test_a_local_submit_gets_the_small_machines_partitions() -> None:
    """``spark-submit --master local[N]`` skips the local builder: the job still sets few shuffle
    partitions, unless the submitter chose them; a cluster keeps Spark's (or the submitter's)."""
    runtime: dict[str, str] = {}

    def submitted(master: str, *, chosen: bool) -> Any:
        conf = SimpleNamespace(contains=lambda key: chosen)
        context = SimpleNamespace(master=master, getConf=lambda: conf)
        return SimpleNamespace(sparkContext=context, conf=SimpleNamespace(set=runtime.__setitem__))

    _submitted_locally(submitted("local[2]", chosen=False))
    assert runtime == {"spark.sql.shuffle.partitions": str(local_partitions())}
    runtime.clear()
    _submitted_locally(submitted("local[2]", chosen=True))
    _submitted_locally(submitted("spark://127.0.0.1:7077", chosen=False))
    assert runtime == {}
