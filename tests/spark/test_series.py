"""The report's series as plan.json carries them (spark/series.py): thinned, peaks kept."""

from __future__ import annotations

import pandas as pd

from spark.series import plan_series, thin


def test_a_long_series_is_thinned_to_the_peak_of_each_run() -> None:
    frame = pd.DataFrame(
        {"interval_start": [60 * i for i in range(1000)], "offered_rps": [1.0] * 1000}
    )
    frame.loc[777, "offered_rps"] = 50.0  # one peak minute
    out = thin(frame, {"offered": "offered_rps"}, points=100)
    assert len(out["t"]) == len(out["offered"]) == 100
    assert out["t"][0] == 0 and out["t"][1] == 600  # runs of 10 intervals, at their start
    assert max(out["offered"]) == 50.0 and out["offered"].count(50.0) == 1


def test_a_short_series_is_kept_whole_and_an_empty_one_is_empty() -> None:
    frame = pd.DataFrame({"interval_start": [120, 0, 60], "x": [3.0, 1.0, 2.0]})
    assert thin(frame, {"x": "x"}) == {"t": [0, 60, 120], "x": [1.0, 2.0, 3.0]}
    assert thin(pd.DataFrame(), {"x": "x"}) == {"t": [], "x": []}


def test_charted_topics_carry_their_names_and_proposed_quota() -> None:
    top = pd.DataFrame(
        [{"tid": 1, "namespace": "online", "tenant": "a", "topic": "t", "proposed_qps": 30}]
    )
    rows = pd.DataFrame(
        {
            "tid": [1, 1],
            "interval_start": [0, 60],
            "rate": [10.0, 40.0],
            "current_qps": [20, 20],
            "backlog": [0.0, 600.0],
        }
    )
    fleet = pd.DataFrame({"interval_start": [0], "offered_rps": [10.0], "served_rps": [10.0]})
    out = plan_series(fleet, top, rows)
    assert out["fleet"]["replayed_backlog"] == []  # a column the frame lacks: empty
    (topic,) = out["topics"]
    assert topic["topic"] == "t" and topic["proposed_qps"] == 30
    assert topic["rate"] == [10.0, 40.0] and topic["backlog"] == [0.0, 600.0]
