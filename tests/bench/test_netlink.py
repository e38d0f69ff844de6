"""``emq bench dispatch --redis-rtt-ms``'s own logic (:mod:`emq.bench.netlink`): which links run,
and how the links' figures are judged against the issue's targets. The runs themselves are a
benchmark's (``emq bench dispatch``); the proxy has its tests in ``tests/rigs``."""

from __future__ import annotations

from typing import Any

import pytest

from emq.bench.netlink import compare, links, parse_rtts, plan
from emq.cli.main import main
from emq.core.errors import EmqError


def test_round_trip_times_are_parsed_and_run_after_direct_and_the_bare_proxy() -> None:
    assert parse_rtts("0.5, 2") == [0.5, 2.0]
    assert links([2.0, 0.5, 2.0, 0.0]) == [None, 0.0, 0.5, 2.0]
    assert plan("all", noop=False) == ["W2", "W3", "W5"]
    assert plan("W12", noop=False) == ["W12"]
    for bad in ("", "fast", "-1", "1,x", "5000"):
        with pytest.raises(EmqError, match="--redis-rtt-ms"):
            parse_rtts(bad)
    with pytest.raises(EmqError, match="--noop"):
        plan("W2", noop=True)


def test_a_bad_round_trip_time_is_one_line_and_no_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "dispatch", "--redis-rtt-ms", "2ms"]) == 1  # (in this process: quick)
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--redis-rtt-ms" in err, err


def _result(workload: str, rtt: float | None, **figures: Any) -> dict[str, Any]:
    link = {"rtt_ms": rtt, "proxy_cpu_s": 0.1, "proxy_cpu_pct_of_core": 1.0}
    return {"workload": workload, "redis_link": link, **figures}


def test_the_links_are_judged_against_direct_and_the_rtt_bound() -> None:
    w3 = {"sliding_max": 1.0, "sustained_min": 0.99}
    ok, over = {"sliding_max": True, "sustained_min": True}, {"sliding_max": False}
    results = [
        _result("W2", None, jobs_per_s=10_000, worker_cpu_us_per_job=60),
        _result("W5", None, p99_ms=12.0),
        _result("W3", None, **w3, **{"pass": ok}),
        _result("W2", 0.0, jobs_per_s=9_500, worker_cpu_us_per_job=61, proxy_cpu_us_per_job=9),
        _result("W5", 2.0, p99_ms=27.0),  # over 3 x 2 + 20
        _result("W2", 2.0, jobs_per_s=8_900, worker_cpu_us_per_job=62, proxy_cpu_us_per_job=9),
        _result("W3", 2.0, **w3, **{"pass": ok | over}),
    ]
    network = compare(results)
    assert network["pass"] == {
        "W5 p99 direct": True,
        "W3 sliding_max direct": True,
        "W3 sustained_min direct": True,
        "W2 proxy 0 ms >= 0.9 x direct": True,
        "W5 p99 proxy 2 ms": False,
        "W2 proxy 2 ms >= 0.9 x direct": False,
        "W3 sliding_max proxy 2 ms": False,
        "W3 sustained_min proxy 2 ms": True,
    }
    row = network["links"]["proxy 2 ms"]
    assert row["W2_vs_direct"] == 0.89 and row["W2_proxy_cpu_us_per_job"] == 9
    assert row["W5_high_p99_bound_ms"] == 26.0
