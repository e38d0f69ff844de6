"""The promise checker on hand-made delivery logs: each figure, and the edges that fool a naive one
(a sliding window across a second boundary, half-open windows, retries, dead letters)."""

from __future__ import annotations

import pytest

from emq.bench.promises import (
    Delivery,
    Quota,
    busiest_second,
    busiest_window,
    check,
    duplicates,
    first_after,
    longest_gap,
    lost,
    parse_log,
    sustained,
)


def d(at: float, job_id: str, topic: str = "a", status: int = 200) -> Delivery:
    return Delivery(at, job_id, topic, status)


def test_lost_counts_accepted_jobs_neither_delivered_with_a_2xx_nor_dead_lettered() -> None:
    log = [d(1.0, "j1"), d(1.1, "j2", status=500), d(1.2, "j3", status=0), d(1.3, "j9")]
    assert lost({"j1", "j2", "j3", "j4"}, log, dead={"j3"}) == {"j2", "j4"}
    # A delivery of an id nobody accepted (j9) is not a loss, nor does it hide one.


def test_duplicates_are_2xx_deliveries_beyond_the_first_per_id() -> None:
    log = [d(1, "j1"), d(2, "j1"), d(3, "j1"), d(4, "j2", status=503), d(5, "j2"), d(6, "j3")]
    assert duplicates(log) == 2  # j1 three times; a failed attempt then a success is no duplicate


def test_busiest_second_is_by_wall_clock_second() -> None:
    assert busiest_second([10.1, 10.9, 11.0, 11.5, 11.99]) == 3
    assert busiest_second([]) == 0


def test_sliding_window_catches_a_burst_that_straddles_a_second_boundary() -> None:
    # 5 at the end of second 10 and 5 at the start of second 11: each second holds 5,
    # but the 1000 ms from 10.6 to 11.6 holds all 10.
    times = [10.6, 10.7, 10.8, 10.9, 10.95, 11.0, 11.1, 11.2, 11.3, 11.5]
    assert busiest_second(times) == 5
    assert busiest_window(times) == 10


def test_sliding_window_is_half_open() -> None:
    assert busiest_window([1.0, 2.0, 3.0]) == 1  # exactly one second apart: never together
    assert busiest_window([1.0, 1.999, 2.0]) == 2
    assert busiest_window([]) == 0
    assert busiest_window([5.0, 5.0, 5.0]) == 3


def test_sustained_rate_uses_only_the_complete_seconds() -> None:
    # Partial first (10.x) and last (13.x) seconds; 11 and 12 hold 8 each, at qps 10 -> 0.8.
    full = [s + i / 8 for s in (11, 12) for i in range(8)]
    times = sorted([10.9, *full, 13.1])
    assert sustained(times, qps=10) == pytest.approx(0.8)
    assert sustained([1.0, 2.5], qps=10) is None  # no complete second in between


def test_longest_gap_counts_the_edges_of_the_stretch() -> None:
    times = [1.0, 2.0, 6.0, 6.5]
    assert longest_gap(times, 0.0, 7.0) == pytest.approx(4.0)  # 2.0 -> 6.0
    assert longest_gap(times, 0.0, 20.0) == pytest.approx(13.5)  # 6.5 -> the end
    assert longest_gap(times, 3.0, 5.0) == pytest.approx(2.0)  # nothing inside: all of it
    assert longest_gap([], 0.0, 3.0) == pytest.approx(3.0)


def test_first_after() -> None:
    assert first_after([1.0, 4.0, 9.0], 3.5) == pytest.approx(0.5)
    assert first_after([1.0, 4.0], 4.0) == 0.0
    assert first_after([1.0], 2.0) is None


def test_check_holds_quota_with_one_job_of_slack_per_group() -> None:
    # Topic "a" (qps 4, 2 groups: limit 6) sends 6 in a sliding window across 10/11: within.
    # Topic "b" (qps 4, 1 group: limit 5) sends 6 within one second: over.
    log = [d(10.5 + i * 0.1, f"a{i}") for i in range(6)]
    log += [d(20.0 + i * 0.1, f"b{i}", topic="b") for i in range(6)]
    quotas = {"a": Quota(4, 2), "b": Quota(4, 1)}
    out = check(log, {x.job_id for x in log}, set(), quotas)
    a, b = out["topics"]["a"], out["topics"]["b"]
    assert (a["busiest_second"], a["busiest_window"], a["within"]) == (5, 6, True)
    assert (b["busiest_second"], b["busiest_window"], b["within"]) == (6, 6, False)
    assert out["quota_held"] is False
    assert out["max_window_ratio"] == 1.5 and out["max_second_ratio"] == 1.5
    assert out["lost"] == 0 and out["duplicates"] == 0 and out["delivered"] == 12


def test_check_reports_gaps_within_a_window_per_topic() -> None:
    log = [d(t, f"j{t}") for t in (1.0, 2.0, 8.0)]
    out = check(log, [], [], {"a": Quota(10), "quiet": Quota(10)}, window=(0.0, 10.0))
    assert out["topics"]["a"]["longest_gap_s"] == 6.0
    assert out["topics"]["quiet"]["longest_gap_s"] == 10.0  # nothing at all: the whole window
    assert out["topics"]["quiet"]["requests"] == 0


def test_quota_counts_every_request_but_loss_only_2xx() -> None:
    log = [d(1.0 + i * 0.01, "j1", status=503) for i in range(5)] + [d(1.5, "j1")]
    out = check(log, {"j1"}, set(), {"a": Quota(3)})
    assert out["topics"]["a"]["busiest_window"] == 6 and not out["quota_held"]
    assert out["lost"] == 0 and out["duplicates"] == 0


def test_parse_log_reads_the_sinks_rows_with_group_priority_and_key_from_the_query() -> None:
    rows = [
        [1.5, "a", "msg_1", 200, "g=2&p=high&k=user-7"],
        [1.6, "b", "msg_2", 0, ""],
        [1.7, "c", "msg_3", 200, "g=x"],
    ]
    a, b, c = parse_log(rows)
    assert a == Delivery(1.5, "msg_1", "a", 200, 2, "high", "user-7")
    assert b == Delivery(1.6, "msg_2", "b", 0) and not b.ok
    assert c.group is None  # not a number: not a group


def test_jobs_still_stored_when_the_run_ends_are_waiting_not_lost() -> None:
    log = [d(1.0, "j1")]
    out = check(log, {"j1", "j2", "j3"}, set(), {"a": Quota(3)}, stored={"j2", "j1"})
    # j2 is still in its queue (the drain wait ended first); j3 is nowhere: lost. A stored id
    # that was delivered too (j1: delivered, its checkpoint not yet written) counts once.
    assert (out["lost"], out["still_stored"], out["lost_sample"]) == (1, 1, ["j3"])
