"""The promise checker's invariants on hand-made delivery logs: for each, one log that keeps the
promise and one that breaks it (duplicates before a fault, quota across a live change, sustained
rate, priority order, key order, isolation), and the verdict table built from them."""

from __future__ import annotations

from pathlib import Path

from emq.bench import mixed
from emq.bench.promises import (
    BOUNDS,
    Delivery,
    Quota,
    backlogged_rate,
    check,
    figures,
    key_inversions,
    key_overlaps,
    parse_log,
    priority_grace_s,
    priority_inversions,
    quota_figures,
    unexplained_duplicates,
    verdict,
    verdict_of,
)
from tests.bench.cli import bench_error


def d(at: float, job_id: str, topic: str = "a", status: int = 200, **kw: object) -> Delivery:
    return Delivery(at, job_id, topic, status, **kw)  # type: ignore[arg-type]


def job(at: float, job_id: str, p: str, enqueued: float, group: int = 0, **kw: object) -> Delivery:
    return d(at, job_id, group=group, priority=p, enqueued=enqueued, **kw)


# --------------------------------------------------------------------------- loss, duplicates


def test_loss_passes_when_every_accepted_id_is_delivered_or_dead_and_fails_otherwise() -> None:
    log = [d(1.0, "j1"), d(1.1, "j2", status=500)]
    kept = check(log, {"j1", "j2"}, {"j2"}, {"a": Quota(10)})
    broken = check(log, {"j1", "j2", "j3"}, {"j2"}, {"a": Quota(10)})
    assert verdict(kept)["lost"] is True
    assert verdict(broken)["lost"] is False and broken["lost_sample"] == ["j3"]


def test_duplicates_are_allowed_only_after_a_fault() -> None:
    log = [d(1.0, "j1"), d(2.0, "j2"), d(5.0, "j1"), d(6.0, "j2", status=500)]
    assert unexplained_duplicates(log, faults=[4.0]) == 0  # j1 again after the kill at 4.0
    assert unexplained_duplicates(log, faults=[]) == 1  # no crash: a duplicate is a broken promise
    assert unexplained_duplicates(log, faults=[5.5]) == 1  # the fault came after it
    out = check(log, {"j1", "j2"}, set(), {"a": Quota(10)}, faults=[4.0])
    assert out["duplicates"] == 1 and out["duplicates_before_fault"] == 0 and out["faults"] == 1


# --------------------------------------------------------------------------- quota, sustained


def test_a_quota_change_allows_the_new_limit_only_once_it_is_in_force() -> None:
    # 10 QPS, raised to 20 at t=100; a window may hold 21 from APPLY_S (2 s) before the change.
    before = [90 + i / 11 for i in range(11)]  # 11 in one second before: within 10 + 1
    after = [101 + i / 21 for i in range(21)]  # 21 in one second after the change: within 20 + 1
    kept = quota_figures(before + after, Quota(10), [(100.0, Quota(20))])
    assert kept["within"] and kept["busiest_window"] == 21
    early = [95 + i / 21 for i in range(21)]  # the new rate 5 s before the change: over
    broken = quota_figures(early, Quota(10), [(100.0, Quota(20))])
    assert not broken["within"] and broken["window_ratio"] > 1.0


def test_a_quota_lowered_live_is_owed_from_apply_s_after_the_change() -> None:
    lag = [99 + i / 21 for i in range(21)] + [101 + i / 21 for i in range(21)]
    assert quota_figures(lag, Quota(20), [(100.0, Quota(5))])["within"]  # within APPLY_S: fine
    late = [104 + i / 21 for i in range(21)]
    assert not quota_figures(late, Quota(20), [(100.0, Quota(5))])["within"]


def test_sustained_rate_of_steady_topics_and_across_changes() -> None:
    steady = [10 + i / 10 for i in range(60)]  # 10/s for 6 s at qps 10, all ready at 10
    slow = [10 + i / 5 for i in range(40)]  # 5/s: half the quota
    kept = check(
        [d(t, f"a{t}", enqueued=10.0) for t in steady], [], [], {"a": Quota(10)}, steady=["a"]
    )
    broken = check(
        [d(t, f"a{t}", enqueued=10.0) for t in slow], [], [], {"a": Quota(10)}, steady=["a"]
    )
    assert kept["sustained_min_ratio"] == 1.0 and verdict(kept)["sustained_min_ratio"]
    assert broken["sustained_min_ratio"] == 0.5 and not verdict(broken)["sustained_min_ratio"]
    # Raised from 10 to 20 at t=20: 10/s before, 20/s from 22 on: both stretches at quota.
    raised = [10 + i / 10 for i in range(100)] + [22 + i / 20 for i in range(100)]
    assert quota_figures(raised, Quota(10), [(20.0, Quota(20))])["sustained_ratio"] == 1.0
    stuck = [10 + i / 10 for i in range(200)]  # the raise never taken up
    assert quota_figures(stuck, Quota(10), [(20.0, Quota(20))])["sustained_ratio"] == 0.5


def test_isolation_is_the_steady_topics_rate_while_others_misbehave() -> None:
    good = [d(10 + i / 10, f"a{i}", enqueued=10.0) for i in range(60)]
    starved = [d(10 + i / 5, f"a{i}", enqueued=10.0) for i in range(40)]
    noisy = [d(10 + i / 100, f"n{i}", topic="noisy", status=500) for i in range(300)]
    quotas = {"a": Quota(10), "noisy": Quota(100)}
    kept = check(good + noisy, [], [], quotas, steady=["a"], misbehaving=["noisy"])
    broken = check(starved + noisy, [], [], quotas, steady=["a"], misbehaving=["noisy"])
    assert verdict(kept)["isolation_min_ratio"] is True
    assert verdict(broken)["isolation_min_ratio"] is False
    alone = check(good, [], [], {"a": Quota(10)}, steady=["a"])
    assert alone["isolation_min_ratio"] is None and verdict(alone)["isolation_min_ratio"] is None


# --------------------------------------------------------------------------- priority


def test_priority_lows_already_in_flight_within_the_grace_are_no_inversion() -> None:
    grace = {"a": priority_grace_s(Quota(10))}  # 0.15 + 0.1 s
    log = [
        job(10.0, "l1", "low", enqueued=1.0),
        job(10.2, "l2", "low", enqueued=1.0),  # within the grace after the high was ready
        job(10.3, "h1", "high", enqueued=10.0),
        job(10.4, "l3", "low", enqueued=1.0),
    ]
    assert priority_inversions(log, grace)["inversions"] == 0


def test_priority_lows_sent_while_a_high_waited_past_the_grace_are_inversions() -> None:
    grace = {"a": priority_grace_s(Quota(10))}
    log = [
        job(10.5, "l1", "low", enqueued=1.0),
        job(10.6, "m1", "medium", enqueued=11.0),  # even enqueued after the high
        job(10.7, "l2", "low", enqueued=1.0, group=1),  # another group: not held against it
        job(11.0, "h1", "high", enqueued=10.0),
    ]
    out = priority_inversions(log, grace)
    assert out["inversions"] == 2 and out["overtaken_jobs"] == 1 and out["worst"] == [2, "h1"]
    assert figures(check(log, [], [], {"a": Quota(10)}))["priority_inversions"] == 2


def test_priority_waits_from_the_delay_and_not_for_jobs_that_failed_an_attempt() -> None:
    grace = {"a": 0.15}
    delayed = [job(10.5, "l1", "low", enqueued=1.0), job(11.0, "h1", "high", 9.0, delay_s=2.0)]
    assert priority_inversions(delayed, grace)["inversions"] == 0  # ready at 11.0
    retried = [
        job(9.1, "h1", "high", enqueued=9.0, status=500),
        job(10.5, "l1", "low", enqueued=1.0),
        job(11.0, "h1", "high", enqueued=9.0),
    ]
    assert priority_inversions(retried, grace)["inversions"] == 0


def test_priority_waits_from_when_the_api_accepted_the_high_when_that_came_later() -> None:
    """The URL carries when the client made the job; its batch's 202 came back 0.8 s later (a
    loaded API): lows delivered before the high was even stored are no inversion, those after
    it was (plus the grace) are, and so is everything after a delay counted from the 202."""
    grace = {"a": priority_grace_s(Quota(10))}  # 0.25 s
    lows = [job(at, f"l{i}", "low", enqueued=1.0) for i, at in enumerate((10.3, 10.5, 10.7))]
    late = [*lows, job(10.9, "h", "high", enqueued=10.0)]
    assert priority_inversions(late, grace)["inversions"] == 3  # judged from the URL's time
    out = check(late, ["h"], [], {"a": Quota(10)}, accepted_at={"h": 10.8})
    assert out["priority"]["inversions"] == 0
    # Accepted at once: the lows past 10.1 + 0.25 count as before.
    soon = check(late, ["h"], [], {"a": Quota(10)}, accepted_at={"h": 10.1})
    assert soon["priority"]["inversions"] == 2
    # Delayed 0.3 s: ready 0.3 s after the 202 (10.1 -> 10.4, + grace 10.65): the 10.7 low.
    delayed = [*lows, job(10.9, "h", "high", enqueued=10.0, delay_s=0.3)]
    assert (
        check(delayed, [], [], {"a": Quota(10)}, accepted_at={"h": 10.1})["priority"]["inversions"]
        == 1
    )
    # A 202 that came back before the URL's time (clocks read in another order) changes nothing.
    assert (
        check(late, [], [], {"a": Quota(10)}, accepted_at={"h": 9.0})["priority"]["inversions"] == 3
    )


def test_a_record_is_ready_from_the_later_of_made_and_accepted() -> None:
    made = d(5.0, "j", enqueued=1.0, delay_s=0.5)
    assert made.ready == 1.5
    assert made.__class__(5.0, "j", "a", enqueued=1.0, delay_s=0.5, accepted=2.0).ready == 2.5
    bare = d(5.0, "j", accepted=2.0)
    assert bare.ready == 2.0 and d(5.0, "j").ready is None


def test_priority_a_high_waiting_for_its_keys_low_in_flight_is_no_inversion() -> None:
    """Order per key: a high of key k waits for k's low in flight (a 0.5 s endpoint); lows of
    another key go meanwhile. Neither is an inversion."""
    grace = {"a": priority_grace_s(Quota(10))}  # 0.25 s
    log = [
        job(10.0, "kl", "low", enqueued=1.0, key="k"),  # in flight when the high is ready
        job(10.2, "z1", "low", enqueued=1.0, key="z"),
        job(10.4, "z2", "low", enqueued=1.0, key="z"),
        job(10.55, "kh", "high", enqueued=10.05, key="k"),
    ]
    assert priority_inversions(log, grace, {"a": 0.5})["inversions"] == 0
    # Without the round trip known, the lows past the grace count (the high could have gone).
    assert priority_inversions(log, grace)["inversions"] == 1


def test_priority_lows_of_other_keys_while_a_high_waits_behind_its_own_key_are_no_inversion() -> (
    None
):
    grace = {"a": priority_grace_s(Quota(10))}
    log = [
        *(
            job(at, f"h{i}", "high", enqueued=9.0, key="k")
            for i, at in enumerate((10.1, 10.4, 10.7))
        ),
        *(
            job(at, f"z{i}", "low", enqueued=1.0, key="z")
            for i, at in enumerate((10.5, 10.8, 10.9))
        ),
        job(10.85, "u", "low", enqueued=1.0),  # unkeyed: also free to go
        job(11.0, "kh", "high", enqueued=10.0, key="k"),  # behind k's highs enqueued before it
    ]
    assert priority_inversions(log, grace)["inversions"] == 0


def test_priority_a_keys_lows_passing_its_waiting_high_are_inversions() -> None:
    grace = {"a": priority_grace_s(Quota(10))}
    log = [
        job(10.5, "kl1", "low", enqueued=1.0, key="k"),
        job(10.6, "kl2", "low", enqueued=1.0, key="k"),
        job(10.7, "z", "low", enqueued=1.0, key="z"),  # the high was free to go before it
        job(11.0, "kh", "high", enqueued=10.0, key="k"),
    ]
    out = priority_inversions(log, grace)
    assert out["inversions"] == 3 and out["worst"] == [3, "kh"]


def test_priority_in_worker_counts_overtaken_jobs_whose_queue_was_read_past_them() -> None:
    """A high accepted at 10.0 is passed by lows from 10.3 on. A high of its group made after
    that 202 (so stored behind it) delivered before the first passing low shows the worker had
    read it: a dispatch-stage inversion. One delivered after the lows shows nothing of the kind
    (the high may still have been in the store), nor does a high of the same batch (a read may
    split a batch), nor a later medium (another queue). The inversions counted are the same."""
    grace = {"a": priority_grace_s(Quota(10))}  # 0.25 s
    lows = [job(at, f"l{i}", "low", enqueued=1.0) for i, at in enumerate((10.3, 10.4))]
    high = job(10.6, "h", "high", enqueued=9.9, accepted=10.0)
    read = job(10.2, "h2", "high", enqueued=10.05)  # made after h's 202, delivered first
    for extra, in_worker in (
        ([read], 1),
        ([job(10.5, "h2", "high", enqueued=10.2)], 0),  # after the first passing low
        ([job(10.2, "h2", "high", enqueued=9.95, accepted=10.0)], 0),  # h's own batch
        ([job(10.2, "m", "medium", enqueued=10.05)], 0),  # the medium queue, not h's
        ([job(10.2, "h2", "high", enqueued=10.05, group=1)], 0),  # another group
    ):
        out = priority_inversions([*lows, high, *extra], grace)
        assert (out["inversions"], out["in_worker"]) == (2, in_worker), extra
    # Nothing overtaken, nothing in the worker's count.
    assert priority_inversions([read, high], grace)["in_worker"] == 0


# --------------------------------------------------------------------------- key order


def keyed(at: float, seq: int, status: int = 200, key: str = "k") -> Delivery:
    return d(at, f"{key}{seq}", status=status, key=key, seq=seq)


def test_key_order_kept() -> None:
    log = [keyed(1.0, 0), keyed(1.1, 1), keyed(1.2, 2), keyed(1.05, 0, key="z")]
    assert key_inversions(log) == {"inversions": 0, "keys": 2, "first": None}
    mixed = [keyed(1.0, 1), d(1.1, "k0", key="k", seq=0, priority="high")]
    assert key_inversions(mixed)["inversions"] == 0  # a high of the key may pass its lows


def test_key_order_broken_counts_each_overtaken_job() -> None:
    log = [keyed(1.0, 0), keyed(1.1, 2), keyed(1.2, 1), keyed(1.3, 3)]
    out = key_inversions(log)
    assert out["inversions"] == 1 and out["first"] == "a/k#1"
    assert verdict(check(log, [], [], {"a": Quota(10)}))["key_inversions"] is False


def test_key_order_is_not_owed_past_a_failure_nor_by_a_duplicate() -> None:
    log = [keyed(1.0, 0, status=500), keyed(1.1, 1), keyed(2.0, 0), keyed(2.5, 1)]
    assert key_inversions(log)["inversions"] == 0  # 0 failed, 1 went first; 1 again: a duplicate


def test_parse_log_reads_enqueue_time_delay_and_sequence() -> None:
    (row,) = parse_log([[2.0, "a", "m", 200, "g=1&p=high&k=u&s=7&e=1.25&d=0.5"]])
    assert (row.seq, row.enqueued, row.delay_s, row.ready) == (7, 1.25, 0.5, 1.75)
    (bare,) = parse_log([[2.0, "a", "m", 200, "e=x"]])
    assert bare.enqueued is None and bare.ready is None and bare.delay_s == 0.0


def test_bench_promises_bad_arguments_are_one_line_and_a_non_zero_exit() -> None:
    for args, word in (
        (["--seeds", "0"], "--seeds"),
        (["--duration-s", "1"], "--duration-s"),
        (["--seed", "0"], "--seed"),
    ):
        line = bench_error("promises", *args)
        assert line.startswith("emq: error: ") and word in line, line


def test_worst_figures_over_seeds_and_the_summary_table() -> None:
    seeds = [
        {"seed": 1, "figures": {"lost": 0, "sustained_min_ratio": 0.97, "key_inversions": 3}},
        {"seed": 2, "figures": {"lost": 2, "sustained_min_ratio": 0.99, "key_inversions": 0}},
    ]
    worst = mixed.worst(seeds)
    assert worst["lost"] == 2 and worst["sustained_min_ratio"] == 0.97
    assert worst["key_inversions"] == 3 and worst["priority_inversions"] is None
    doc = {
        "seeds": seeds,
        "bounds": {k: f"{op} {b:g}" for k, (op, b) in BOUNDS.items()},
        "worst": worst,
        "pass": {k: None if v is None else verdict_of(k, v) for k, v in worst.items()},
    }
    table = mixed.summary(doc)
    assert "| lost | 0 | 2 | 2 | <= 0 | **no** |" in table
    assert "| priority_inversions | - | - | None | <= 0 | not measured |" in table


def test_the_backlogged_rate_counts_only_seconds_that_ended_with_a_backlog() -> None:
    # 100 jobs of qps 10 all ready at t=10; delivered 10/s from 10.0 to 19.9: the backlog lasts
    # 2 s of quota until t=18, so seconds 11..17 are judged (10 each: ratio 1.0); then a trickle.
    log = [d(10 + i / 10, f"a{i}", enqueued=10.0) for i in range(100)]
    log += [d(25 + i, f"t{i}", enqueued=25.0 + i) for i in range(5)]  # no backlog: not judged
    assert backlogged_rate(log, "a", Quota(10)) == 1.0
    slow = [d(10 + i / 8, f"a{i}", enqueued=10.0) for i in range(100)]  # 8/s with a backlog
    assert backlogged_rate(slow, "a", Quota(10)) == 0.8
    assert backlogged_rate(log[-5:], "a", Quota(10)) is None  # never a backlog
    # Raised to 20 at t=14: seconds 14 and 15 are left out, 16.. owe 20.
    raised = [d(10 + i / 10, f"a{i}", enqueued=10.0) for i in range(40)]
    raised += [d(14 + i / 20, f"b{i}", enqueued=10.0) for i in range(200)]
    assert backlogged_rate(raised, "a", Quota(10), [(14.0, Quota(20))]) == 1.0


def test_key_overlaps_are_requests_of_a_key_sent_before_the_previous_was_answered() -> None:
    one_at_a_time = [keyed(1.0, 0), keyed(1.31, 1), keyed(1.62, 2), keyed(1.1, 0, key="z")]
    assert key_overlaps(one_at_a_time, {"a": 0.3}) == 0
    two_in_flight = [keyed(1.0, 0), keyed(1.05, 1), keyed(1.4, 2)]
    assert key_overlaps(two_in_flight, {"a": 0.3}) == 1
    assert key_overlaps(two_in_flight, {}) == 0  # an endpoint answering at once shows nothing
    out = check(two_in_flight, [], [], {"a": Quota(10)}, answer_s={"a": 0.3})
    assert verdict(out)["key_overlaps"] is False


def test_kept_inputs_are_judged_again_as_they_were(tmp_path: Path) -> None:
    """``emq bench promises --log DIR`` keeps what the checker judged; judged again from the
    file, every figure is the same."""
    log = [
        job(10.5, "l1", "low", enqueued=1.0),
        job(11.0, "h1", "high", enqueued=10.0, key="k", seq=0),
        d(11.2, "x", "b", status=500),
    ]
    quotas = {"a": Quota(10), "b": Quota(5)}
    inputs = {
        "faults": [12.0],
        "changes": {"a": [(10.8, Quota(20, 1))]},
        "steady": ["a"],
        "misbehaving": ["b"],
        "answer_s": {"b": 0.3},
        "stored": {"y"},
        "accepted_at": {"h1": 10.1},
    }
    mixed.keep_inputs(tmp_path / "seed-1.json", log, {"l1", "h1", "x", "y"}, {"x"}, quotas, inputs)
    again = mixed.recheck(tmp_path / "seed-1.json")
    assert again == check(log, {"l1", "h1", "x", "y"}, {"x"}, quotas, **inputs)  # type: ignore[arg-type]
    assert again["priority"]["inversions"] == 1 and again["still_stored"] == 1
