"""``emq history synth`` and ``emq plan run`` as users run them, and the spark-submit path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from emq.cli.main import main
from spark.session import local_partitions

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
    assert main(["plan", "run", "--history", str(history), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    for step in ("[2/6] reading history", "[5/6] quota dry-run", "[6/6] writing plan.json"):
        assert step in captured.err
    assert "20 topics" in captured.out and "workers" in captured.out
    assert {"plan.json", "report.html", "topics.parquet", "fleet.parquet"} <= {
        p.name for p in out.iterdir()
    }


def test_plan_run_json(history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "run", "--history", str(history), "--out", str(tmp_path / "p")]
    assert main([*argv, "--headroom", "1.5", "--worker-qps", "250", "--quiet", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["topics"] == 20 and result["fleet"]["worker_qps"] == 250
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


def test_worker_capacity_from_a_benchmark(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"name": "dispatch", "result": {"delivered_per_s": 4321.0}}))
    argv = ["plan", "run", "--history", str(history), "--out", str(tmp_path / "p")]
    assert main([*argv, "--worker-bench", str(bench), "--quiet", "--json"]) == 0
    fleet = json.loads(capsys.readouterr().out)["fleet"]
    assert fleet["worker_qps"] == 4321.0 and "bench.json" in fleet["worker_qps_source"]


def test_spark_submit_runs_the_same_job(history: Path, tmp_path: Path) -> None:
    submit = Path(sys.executable).with_name("spark-submit")
    if not submit.exists():
        submit = Path(shutil.which("spark-submit") or "spark-submit")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [
            str(submit),
            "--master",
            "local[2]",
            "--driver-java-options",  # a short job: the JVM's quick compiler (spark/README.md)
            "-XX:TieredStopAtLevel=1",
            str(ROOT / "spark" / "plan_job.py"),
            "--history",
            str(history),
            "--out",
            str(tmp_path / "p"),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["topics"] == 20
    # spark-submit chose the master, and the small machine's settings still apply
    assert summary["shuffle_partitions"] == local_partitions()
    assert (tmp_path / "p" / "report.html").exists()
