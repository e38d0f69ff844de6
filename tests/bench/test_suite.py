"""``emq bench all``'s command line; the suite itself runs in tests/spark/test_bench_suite.py
(its plan part's jobs share the Spark tests' session)."""

from __future__ import annotations

from tests.bench.cli import bench_error


def test_bad_arguments_fail_at_once_with_one_line() -> None:
    for args in (["--rows", "5"], ["--duration-s", "0"]):
        assert bench_error("all", *args).startswith("emq: error: --")
