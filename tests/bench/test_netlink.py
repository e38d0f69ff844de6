"""``emq bench dispatch --redis-rtt-ms``'s own logic (:mod:`emq.bench.netlink`): which links run,
and how the links' figures are judged against the issue's targets. The runs themselves are a
benchmark's (``emq bench dispatch``); the proxy has its tests in ``tests/rigs``."""

from __future__ import annotations

from typing import Any

import pytest

from emq.bench import netlink, netlink_promises, promises
from emq.bench.netlink import compare, links, parse_rtts, plan
from emq.cli.main import main
from emq.core.errors import EmqError


def test_round_trip_times_are_parsed_and_run_after_direct_and_the_bare_proxy() -> None:
    assert parse_rtts("0.5, 2") == [0.5, 2.0]
    assert links([2.0, 0.5, 2.0, 0.0]) == [None, 0.0, 0.5, 2.0]
    assert plan("all", noop=False) == ["W2", "W3", "W5", "paced"]
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


def _paced(rtt: float | None, delivered_per_s: float, sliding_max: float) -> dict[str, Any]:
    case = {"topics": 100, "qps": 10, "offered_per_s": 1000, "delivered_per_s": delivered_per_s}
    case |= {"worker_cpu_s_per_1000_jobs": 0.2, "redis_commands_per_job": 1.5}
    case |= {"sliding_max": sliding_max, "sustained_min": 0.99, "cpu_ratio_to_w2": 1.1}
    broken = {"topics": 10, "qps": 100, "paced": False, "error": "no delivery measured"}
    return _result("paced", rtt, cases=[case, broken], w2_worker_cpu_us_per_job=60)


def test_paced_behind_a_link_is_judged_on_the_quota_sum_and_the_sliding_second() -> None:
    network = compare(
        [
            _paced(None, 990.0, 1.1),  # 11 in a second at quota 10: its one group's +1
            _paced(0.5, 1025.0, 1.1),  # more than the quota sum
            _paced(2.0, 940.0, 1.2),  # less than 95 % of it, and 12 in a sliding second
        ]
    )
    verdicts = {k: v for k, v in network["pass"].items() if "100x10" in k}
    assert verdicts == {
        "paced 100x10 delivered/s vs quota sum direct": True,
        "paced 100x10 sliding second direct": True,
        "paced 100x10 delivered/s vs quota sum proxy 0.5 ms": False,
        "paced 100x10 sliding second proxy 0.5 ms": True,
        "paced 100x10 delivered/s vs quota sum proxy 2 ms": False,
        "paced 100x10 sliding second proxy 2 ms": False,
    }
    # a case that measured nothing is broken, not skipped
    assert network["pass"]["paced 10x100 delivered/s vs quota sum proxy 2 ms"] is False
    row = network["links"]["proxy 2 ms"]["paced"][0]
    assert row["delivered_vs_quota_sum"] == 0.94 and row["redis_commands_per_job"] == 1.5
    # the bound is a count: 151 in a second at quota 150 (a ratio rounded to 1.0067) is within
    for qps, sliding, ok in ((150, 1.0067, True), (150, 1.0133, False)):
        row = {"case": "1x150", "qps": qps, "delivered_vs_quota_sum": 1.0, "sliding_max": sliding}
        assert netlink.paced_verdicts(row)["paced 1x150 sliding second"] is ok


def test_the_promises_of_each_link_make_one_document() -> None:
    assert netlink_promises.rtts_to_run([2.0, 0.5, 2.0, 0.0]) == [0.0, 0.5, 2.0]
    link = {"proxy_connections": 9, "proxy_cpu_pct_of_core": 1.1}
    seed = {"seed": 1, "figures": {"lost": 0}, "redis_link": link}

    def doc(ok: bool) -> dict[str, Any]:
        verdicts = dict.fromkeys(promises.BOUNDS, True) | {"priority_inversions": ok}
        shared = {"bench": "promises", "date": "d", "machine": {}, "bounds": {}}
        worst = dict.fromkeys(promises.BOUNDS, 0)
        return shared | {"worst": worst, "pass": verdicts, "ok": ok, "seeds": [seed]}

    out = netlink_promises.combine([0.5, 2.0], [doc(True), doc(False)], 61.0)
    assert list(out["links"]) == ["proxy 0.5 ms", "proxy 2 ms"]
    assert out["pass"]["proxy 2 ms"]["priority_inversions"] is False
    assert out["ok"] is False and out["redis_rtt_ms"] == [0.5, 2.0]
    link = out["links"]["proxy 0.5 ms"]
    assert link["rtt_ms"] == 0.5 and link["seeds"] == [seed] and "machine" not in link
    assert set(out["bounds"]) == set(promises.BOUNDS)
    text = netlink_promises.summary(out)
    assert "proxy 2 ms: a promise BROKEN" in text and "seed 1: 9 connections" in text


def test_promises_refuse_a_bad_round_trip_time_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("-1", "two"):
        assert main(["bench", "promises", "--redis-rtt-ms", bad, "--seeds", "1"]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "--redis-rtt-ms" in err, err
