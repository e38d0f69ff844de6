"""``emq bench regroup``'s judgement on hand-made delivery logs: which keys a raise moves, the
order per key split by moved and unmoved keys, the time to reach the raised quota, and the
quota in force across the raise and the lowering."""

from __future__ import annotations

import pytest

from capacity import group_count
from emq.bench import regroup
from emq.bench.promises import Delivery, Quota
from emq.bench.regroup import TOPIC, Plan, judge, key_order, make_plan, moved_keys, reach_s


def d(
    at: float, job_id: str, key: str | None = None, seq: int | None = None, group: int = 0
) -> Delivery:
    return Delivery(at, job_id, TOPIC, 200, group=group, priority="medium", key=key, seq=seq)


def test_every_seeds_raise_crosses_a_multiple_of_150_and_the_lowering_keeps_the_groups() -> None:
    for seed in range(1, 9):
        plan = make_plan(seed, 15.0)
        assert plan == make_plan(seed, 15.0) and plan.phase_s == 5.0
        assert plan.groups_after > plan.groups_before == group_count(plan.qps)
        assert plan.groups_after == group_count(plan.raised)
    assert (make_plan(1).qps, make_plan(1).raised, make_plan(1).groups_after) == (140, 320, 3)


def test_a_raise_moves_keys_only_to_the_new_groups() -> None:
    keys = [f"k{n}" for n in range(3000)]
    moved = moved_keys(keys, 1, 3)
    assert len(moved) == pytest.approx(2000, rel=0.1)  # jump hash: about 1 - 1/3 of them
    moved = moved_keys(keys, 2, 4)
    assert len(moved) == pytest.approx(1500, rel=0.1)
    from capacity.keyhash import jump_hash

    assert all(jump_hash(k, 4) >= 2 for k in moved)
    assert all(jump_hash(k, 4) == jump_hash(k, 2) for k in set(keys) - moved)


def test_key_order_is_split_into_moved_and_unmoved_keys() -> None:
    log = [
        d(1.0, "a0", "a", 0), d(1.2, "a2", "a", 2), d(1.1, "a1", "a", 1),  # in order
        # b moved to group 1 after its 0 and 1: its 2 there went before them (two inversions
        # of b, none within either group)
        d(2.0, "b2", "b", 2, group=1), d(2.1, "b0", "b", 0), d(2.5, "b1", "b", 1),
    ]  # fmt: skip
    out = key_order(log, moved={"b"})
    assert out["inversions"] == 2 and out["within_groups"] == 0
    assert out["moved"]["inversions"] == 2 and out["moved"]["first"] == f"{TOPIC}/b#1"
    assert out["unmoved"]["inversions"] == 0 and out["unmoved"]["keys"] == 1
    late = d(2.6, "b3", "b", 3, group=1)
    assert key_order([*log, d(2.55, "b4", "b", 4, group=1), late], {"b"})["within_groups"] == 1


def test_reach_is_the_end_of_the_first_sliding_second_at_95_percent_after_the_raise() -> None:
    slow = [10.0 + i / 50 for i in range(100)]  # 50/s from 10 to 12
    fast = [12.0 + i / 100 for i in range(300)]  # 100/s from 12 to 15
    times = slow + fast
    # The first second with 95: 11.90-12.90 (5 slow, 90 fast); its 95th arrives at 12.89.
    assert reach_s(times, 10.0, 100, 20.0) == pytest.approx(2.89, abs=0.005)
    assert reach_s(times, 10.0, 200, 20.0) is None
    assert reach_s(times, 10.0, 100, 12.5) is None  # reached only after the lowering
    assert reach_s(times, 10.0, 50, 20.0) == pytest.approx(0.94, abs=0.005)  # the 48th of 50


def test_judge_holds_the_quota_in_force_across_the_raise_and_the_lowering() -> None:
    plan = Plan(1, 10, 300, phase_s=2.0)  # 1 -> 2 groups; 10 QPS, then 300, then 10 again
    changes = [(2.0, Quota(300, 2)), (4.0, Quota(10, 2))]
    before = [d(i / 10, f"a{i}") for i in range(20)]  # 10/s
    raised = [d(2.0 + i / 300, f"b{i}") for i in range(600)]  # 300/s
    after = [d(6.5 + i / 10, f"c{i}") for i in range(10)]  # 10/s, past the 2 s to apply
    log = before + raised + after
    out = judge(log, {x.job_id for x in log}, set(), plan, changes, [])
    assert out["figures"] == {
        "lost": 0, "duplicates": 0, "key_inversions": 0, "second_over_quota": 0,
        "window_over_quota": 0, "reach_s": pytest.approx(0.947, abs=0.01),
    }  # fmt: skip
    assert all(out["pass"].values())
    # 300/s lasting until 6.5 s: 2.5 s after the lowering to 10, over its 10 + 2 at 6.0-6.5.
    late = [d(6.0 + i / 300, f"x{i}") for i in range(150)]
    out = judge(log + late, {x.job_id for x in log + late}, set(), plan, changes, [])
    assert out["figures"]["window_over_quota"] == 1 and out["pass"]["window_over_quota"] is False


def test_judge_counts_a_lost_job_a_duplicate_and_an_inversion() -> None:
    plan = Plan(1, 10, 300, phase_s=2.0)
    changes = [(2.0, Quota(300, 2)), (4.0, Quota(10, 2))]
    log = [d(0.1, "a", "k", 0), d(0.2, "b", "k", 1), d(0.3, "b", "k", 1)]
    log += [d(0.5, "c", "m", 1), d(0.6, "e", "m", 0)]
    out = judge(log, {"a", "b", "c", "e", "lost"}, set(), plan, changes, ["k", "m"])
    figures = out["figures"]
    assert (figures["lost"], figures["duplicates"], figures["key_inversions"]) == (1, 1, 1)
    assert figures["reach_s"] is None and out["pass"]["reach_s"] is False  # nothing raised


def test_run_cli_refuses_bad_values_with_one_line() -> None:
    from emq.core.errors import EmqError

    with pytest.raises(EmqError, match="--seeds"):
        regroup.run_cli(0, None)
    with pytest.raises(EmqError, match="--duration-s"):
        regroup.run_cli(1, 1.0)
