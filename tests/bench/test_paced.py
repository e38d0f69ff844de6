"""``emq bench dispatch --workload paced`` (issue 32): its pure parts, its refusals, and one short
run end to end whose JSON has its shape and whose delivered rate is the quotas' (a property of
pacing, not a speed: the band is wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from emq.bench import dispatch, peers_paced
from emq.bench.workloads_paced import (
    MAX_OFFERED_PER_S,
    backlog_per_topic,
    calls_between,
    case_figures,
    idle_figures,
    parse_counts,
)
from emq.core.errors import EmqError
from tests.bench.cli import bench_error


def test_counts_parse_or_refuse_in_one_line() -> None:
    assert parse_counts("10,100,1000", "--topics", 10_000) == [10, 100, 1000]
    for bad in ("", "x", "10,,100", "0", "-5", "151"):
        with pytest.raises(EmqError, match="--quota takes counts"):
            parse_counts(bad, "--quota", 150)


def test_the_backlog_lasts_the_run_and_is_capped_at_what_a_worker_could_take() -> None:
    assert backlog_per_topic(10, 100, 10) >= 100 * 10 * 1.1  # the measured seconds and more
    many = backlog_per_topic(1000, 100, 10)
    assert many < 100 * 10  # 1000 x 100 QPS: more than a worker delivers, not all stored
    assert many >= MAX_OFFERED_PER_S // 1000 * 10


def test_the_figures_are_per_delivered_job() -> None:
    calls = calls_between({"get": 10, "info": 3}, {"get": 110, "hset": 50, "info": 4})
    assert calls == {"get": 100, "hset": 50}  # (the reading's own INFO left out)
    f = case_figures(10, 100, 2.0, 2000, 0.5, (400, 10), calls)
    assert f["delivered_per_s"] == 1000.0 and f["paced"]
    assert f["worker_cpu_s_per_1000_jobs"] == 0.25 and f["worker_cpu_us_per_job"] == 250.0
    assert f["wakeups_per_s"] == 200.0 and f["involuntary_switches_per_s"] == 5.0
    assert f["redis_commands_per_job"] == 0.075
    assert f["redis_commands_by_name"] == {"get": 0.05, "hset": 0.025}
    assert not case_figures(10, 100, 2.0, 1000, 0.5, (0, 0), {})["paced"]  # half the quota
    with pytest.raises(EmqError, match="no delivery"):
        case_figures(10, 100, 2.0, 0, 0.5, (0, 0), {})


def test_the_idle_figures_are_per_second() -> None:
    f = idle_figures(10, 4.0, 0.04, (100, 4), {"zrangebyscore": 8, "get": 28})
    assert f["worker_cpu_pct_of_core"] == 1.0 and f["wakeups_per_s"] == 25.0
    assert f["redis_commands_per_s"] == 9.0 and f["redis_commands_by_name"]["get"] == 7.0
    with pytest.raises(EmqError, match="nothing measured"):
        idle_figures(10, 0.0, 0.0, (0, 0), {})


def test_the_peers_paced_figures_and_leanest_run() -> None:
    each, flood = peers_paced.backlogs(10)
    assert each >= peers_paced.QPS * 10 and flood == each * peers_paced.FLOOD
    f = peers_paced.paced_figures(5000, 5.0, 1.0)
    assert f["delivered_per_s"] == 1000.0 and f["cpu_s_per_1000_jobs"] == 0.2
    runs = [{**f, "client": "a"}, {"client": "b", "error": "x"}, {**f, "cpu_s_per_1000_jobs": 0.1}]
    assert peers_paced.leanest(runs)["cpu_s_per_1000_jobs"] == 0.1
    with pytest.raises(EmqError):
        peers_paced.paced_figures(0, 5.0, 1.0)


def test_bad_arguments_are_refused_before_anything_starts() -> None:
    with pytest.raises(EmqError, match="--topics takes counts"):
        dispatch.run("paced", topics="ten")
    with pytest.raises(EmqError, match="--quota takes counts from 1 to 150"):
        dispatch.run("paced", quotas="0")
    with pytest.raises(EmqError, match="apply to --workload paced only"):
        dispatch.run("W2", topics="10")


@pytest.mark.parametrize(
    "args, says",
    [
        (["dispatch", "--workload", "paced", "--topics", "ten"], "--topics takes counts"),
        (["peers", "--workload", "W2"], "peers runs its own workload"),
    ],
)
def test_bad_arguments_get_one_line(args: list[str], says: str) -> None:
    assert says in bench_error(*args)


def test_a_short_paced_run_delivers_at_the_quotas() -> None:
    """10 topics at 10 QPS, one second measured (the least), and a short saturated reference
    run: the JSON has its shape, and the delivered rate is the quotas' within a wide band."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    argv = [sys.executable, "-m", "emq", "bench", "dispatch", "--workload", "paced"]
    done = subprocess.run(
        [*argv, "--topics", "10", "--quota", "10", "--duration-s", "0.1", "--json"],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["workload"] == "paced" and set(result["targets"]) == {"cpu_ratio_to_w2"}
    assert result["w2_worker_cpu_us_per_job"] > 0 and result["w2"]["jobs"] > 0
    (case,) = result["cases"]
    assert (case["topics"], case["qps"], case["offered_per_s"]) == (10, 10, 100)
    assert 50 <= case["delivered_per_s"] <= 150  # 10 x 10 QPS
    for key in ("worker_cpu_s_per_1000_jobs", "wakeups_per_s", "redis_commands_per_job"):
        assert case[key] >= 0
    assert case["cpu_ratio_to_w2"] == pytest.approx(
        case["worker_cpu_us_per_job"] / result["w2_worker_cpu_us_per_job"], rel=0.01
    )
    (idle,) = result["idle"]  # the same ten topics with nothing to deliver
    assert idle["topics"] == 10 and 0 <= idle["worker_cpu_pct_of_core"] < 50
    # it looks at its due index about once a second, not ten times (due hints)
    assert idle["redis_commands_by_name"].get("zrangebyscore", 0) <= 5, idle
