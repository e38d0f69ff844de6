"""``emq bench plan-accuracy``'s pure parts: the compression of recorded traffic, the figures
measured from stamps, and the judgement against 10 %; and its refusal of bad arguments."""

from __future__ import annotations

import pandas as pd
import pytest

from emq.bench.plan_accuracy import check_arguments, compare, judge, parse_quotas, scenario
from emq.bench.plan_accuracy_fleet import backlog_peak, backlogged_share, measure
from emq.core.errors import EmqError
from spark.accuracy import Arrivals, arrivals_of, compress
from tests.bench.cli import bench_error


def test_compression_keeps_the_running_total_exact() -> None:
    counts = compress([100, 100, 100, 5, 0, 59], 60)
    # 1.67, 3.33, 5, 5.08, 5.08, 6.07 jobs in all by each interval's end
    assert counts == (2, 1, 2, 0, 0, 1)
    assert sum(compress([1234] * 60, 60)) == round(1234 * 60 / 60)
    assert compress([7, 3], 1) == (7, 3)
    with pytest.raises(EmqError):
        compress([1], 0.5)


def test_arrivals_are_even_within_each_interval() -> None:
    a = Arrivals("t", 10, 2.0, (4, 0, 1))
    assert a.times() == [0.25, 0.75, 1.25, 1.75, 5.0]
    assert (a.jobs, a.duration_s) == (5, 6.0)


def _history(rows: list[tuple[str, int, int, int]], interval_s: int = 60) -> pd.DataFrame:
    return pd.DataFrame(
        [{"topic": t, "interval_start": s, "interval_s": interval_s, "enqueued": n, "quota": q}
         for t, s, n, q in rows]
    )  # fmt: skip


def test_an_hour_of_history_becomes_compressed_arrivals_at_the_same_rates() -> None:
    rows = [("a", 3600 + 60 * i, 600, 20) for i in range(60)]  # 10 jobs/s
    rows += [("b", 3600 + 60 * i, 1200, 5) for i in (0, 1, 30)]  # gaps: no arrivals there
    rows += [("a", 7200, 99_999, 20)]  # the next hour: left out
    got = {a.topic: a for a in arrivals_of(_history(rows), 60, {"b": 7})}
    a, b = got["a"], got["b"]
    assert a.interval_s == 1.0 and a.duration_s == 60.0
    assert a.counts == (10,) * 60 and a.qps == 20  # the recorded quota
    assert b.qps == 7  # the one given
    assert b.counts[:3] == (20, 20, 0) and b.counts[30] == 20 and b.jobs == 60


def test_the_built_in_hour_has_topics_under_over_and_bursting_over_their_quota() -> None:
    history = pd.DataFrame([_row(r) for r in scenario()])
    arrivals = {a.topic: a for a in arrivals_of(history, 60, {})}
    peak = {t: max(a.counts) / a.interval_s for t, a in arrivals.items()}
    low = {t: min(a.counts) / a.interval_s for t, a in arrivals.items()}
    assert peak["fits"] < arrivals["fits"].qps and peak["wide"] < arrivals["wide"].qps
    assert low["over"] > arrivals["over"].qps
    assert peak["burst"] > arrivals["burst"].qps > low["burst"]


def _row(r: object) -> dict[str, object]:
    return {
        k: getattr(r, k) for k in ("topic", "interval_start", "interval_s", "enqueued", "quota")
    }


@pytest.mark.parametrize(
    ("rows", "quotas", "message"),
    [
        ([], {}, "no rows"),
        ([("a", 0, 60, 0)], {}, "no quota"),
        ([("a", 0, 60, 5)], {"zz": 3}, "zz"),
    ],
)
def test_history_that_cannot_be_replayed_is_one_error(
    rows: list[tuple[str, int, int, int]], quotas: dict[str, int], message: str
) -> None:
    history = _history(rows) if rows else pd.DataFrame(columns=["topic", "interval_start"])
    with pytest.raises(EmqError, match=message):
        arrivals_of(history, 60, quotas)


def test_figures_come_from_sending_and_receipt_stamps() -> None:
    a = Arrivals("t", 4, 1.0, (2, 2))  # 2 jobs/s for 2 s, under the quota
    sent = {"j0": ("t", 10.25), "j1": ("t", 10.75), "j2": ("t", 11.25), "j3": ("t", 11.75)}
    sent |= {"other": ("u", 10.0)}
    received = {"j0": 10.35, "j1": 10.85, "j2": 11.45, "j3": 12.5}  # j3: after the window
    got = measure([a], sent, received, 10.0)["t"]
    assert got["delivered_per_s"] == 1.5  # 3 of the 4 within the 2 s
    assert got["longest_delay_s"] == pytest.approx(0.75)
    assert got["backlog_peak"] == 1.0
    # A job never received: no longest delay to speak of.
    unreceived = {k: v for k, v in received.items() if k != "j3"}
    assert measure([a], sent, unreceived, 10.0)["t"]["longest_delay_s"] is None


def test_the_backlog_peak_and_the_share_served_while_backlogged() -> None:
    sent = [0.0] * 30 + [2.0 + 0.1 * i for i in range(10)]  # 30 at once, then 10 a second
    received = [0.1 * (i + 1) for i in range(40)]  # served at 10 a second, from 0.1 s
    assert backlog_peak(sent, received) == 30
    assert backlogged_share(sent, received, 10) == pytest.approx(1.0, abs=0.05)
    assert backlogged_share([0.0, 0.5], [0.1, 0.6], 10) is None  # never a second behind


def test_a_figure_is_judged_against_its_prediction_or_its_resolution() -> None:
    assert compare(100.0, 109.0, 1.0)["pass"] and not compare(100.0, 111.0, 1.0)["pass"]
    assert compare(100.0, 111.0, 1.0)["error"] == pytest.approx(0.11)
    # Predicted 0 (a topic under its quota): judged against the resolution instead.
    assert compare(0.0, 0.09, 1.0)["pass"] and not compare(0.0, 0.2, 1.0)["pass"]
    assert compare(5.0, None, 1.0) == {
        "predicted": 5.0, "measured": None, "error": None, "pass": False,
    }  # fmt: skip


def test_the_judgement_names_each_topic_that_missed_and_the_worst_errors() -> None:
    arrivals = [Arrivals("ok", 10, 1.0, (5,) * 10), Arrivals("off", 10, 1.0, (15,) * 10)]
    predicted = {
        "ok": {"delivered_per_s": 5.0, "backlog_peak": 0.0, "longest_delay_s": 0.0},
        "off": {"delivered_per_s": 10.0, "backlog_peak": 50.0, "longest_delay_s": 5.0},
    }
    measured = {
        "ok": {"delivered_per_s": 5.0, "backlog_peak": 0.5, "longest_delay_s": 0.05},
        "off": {"delivered_per_s": 9.5, "backlog_peak": 56.0, "longest_delay_s": 5.2},
    }
    doc = judge(arrivals, predicted, measured)
    assert doc["topics"]["ok"]["pass"] and not doc["topics"]["off"]["pass"]
    assert doc["topics"]["off"]["backlog_peak"]["error"] == pytest.approx(0.12)
    assert doc["summary"] | {"worst_error": None} == {
        "tolerance": 0.1, "topics": 2, "within": 1, "failed": ["off"], "worst_error": None,
        "pass": False,
    }  # fmt: skip
    assert doc["summary"]["worst_error"]["backlog_peak"] == pytest.approx(0.12)
    assert judge(arrivals[:1], predicted, measured)["summary"]["pass"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compress", "0"], "--compress"),
        (["--at-quota", "fits"], "--at-quota"),
        (["--history", "/nonexistent/history"], "--history"),
    ],
)
def test_bad_arguments_are_one_line_and_start_nothing(args: list[str], message: str) -> None:
    assert message in bench_error("plan-accuracy", *args)


@pytest.mark.parametrize(
    ("compress_by", "quotas"),
    [(float("nan"), []), (3601.0, []), (60.0, ["fits=-3"]), (60.0, ["=3"]), (60.0, ["a=1.5"])],
)
def test_every_bad_value_is_refused_before_anything_starts(
    compress_by: float, quotas: list[str]
) -> None:
    with pytest.raises(EmqError):
        check_arguments(compress_by, quotas, None)
    assert parse_quotas(["fits=40", "over=30"]) == {"fits": 40, "over": 30}


@pytest.mark.parametrize("qps", [30, 40, 120])
def test_the_workers_pacing_serves_a_backlog_at_the_dry_runs_rate(qps: int) -> None:
    # The dry-run serves a backlog at exactly the quota. The workers' own counter (the lean
    # client's SpareLaneLog over its grant window), asked again exactly when it says a grant
    # frees, grants that much: within its first burst (1 + 3 % of the quota) over a minute.
    from worker.groups import SpareLaneLog, grant_window_s
    from worker.http1.pusher import LeanPusher

    counter = SpareLaneLog(qps, window_s=grant_window_s(LeanPusher.write_margin_s))
    now, granted = 1000.0, 0
    while now < 1060.0:
        wait = counter.wait_s(now)
        if wait > 0:
            now += max(wait, 1e-6)
            continue
        got = counter.reserve(10_000, now)
        granted += got
        now += 0 if got else 1e-4
    assert qps * 60 <= granted <= qps * 60 + counter.burst
