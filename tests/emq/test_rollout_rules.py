"""The pure parts of a plan's rollout: flags, the canary choice, steps, the judgement, and the
rollout record's read-time state (abandoned when its CLI stopped beating)."""

from __future__ import annotations

import pytest

from emq.core.errors import InvalidInput
from emq.core.rollout_rules import (
    Signals,
    Thresholds,
    choose_canary,
    judge,
    parse_duration,
    parse_share,
    parse_steps,
    reason,
    split_steps,
)
from emq.core.rollouts import merged, shown


def names(topics: list[tuple[str, str]]) -> list[str]:
    return [f"{t}/{n}" for t, n in topics]


def choose(topics: list[tuple[str, str]], share: float) -> tuple[list[str], list[str]]:
    canary, rest = choose_canary(topics, share, lambda t: t[0], lambda t: f"{t[0]}/{t[1]}")
    return names(canary), names(rest)


@pytest.mark.parametrize(
    ("text", "share"), [("10%", 0.1), ("10", 0.1), (" 0.5 % ", 0.005), ("100%", 1.0)]
)
def test_shares(text: str, share: float) -> None:
    assert parse_share(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["0%", "0", "-5%", "101%", "ten", "", "nan%", "inf"])
def test_bad_shares_name_the_flag(text: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_share(text)
    assert e.value.field == "--canary"


def test_durations() -> None:
    assert parse_duration("5m") == 300
    assert parse_duration("30s") == 30
    assert parse_duration("1.5h") == 5400
    assert parse_duration("250ms") == 0.25
    assert parse_duration("7") == 7
    for bad in ("0s", "5 minutes", "-1m", "m"):
        with pytest.raises(InvalidInput, match="--watch"):
            parse_duration(bad)


def test_steps() -> None:
    assert parse_steps("3") == pytest.approx([1 / 3, 2 / 3, 1])
    assert parse_steps("25,50,100") == pytest.approx([0.25, 0.5, 1])
    for bad in ("0", "21", "50,25,100", "25,50", "x"):
        with pytest.raises(InvalidInput, match="--steps"):
            parse_steps(bad)


def test_the_canary_spreads_across_tenants_and_never_takes_a_whole_tenant() -> None:
    topics = [("a", f"t{i}") for i in range(4)] + [("b", f"t{i}") for i in range(2)]
    topics += [("c", "only")]
    canary, rest = choose(topics, 0.5)  # 4 of 7
    assert len(canary) == 4 and len(rest) == 3
    assert sorted(canary + rest) == sorted(names(topics))
    tenants = [n.split("/")[0] for n in canary]
    assert set(tenants) == {"a", "b"}  # c's one topic would be all of c
    assert tenants.count("b") == 1  # b keeps one
    assert choose(list(reversed(topics)), 0.5) == (canary, rest)  # same plan, same canary


def test_at_least_one_topic_and_one_tenant_alone_is_taken_when_unavoidable() -> None:
    assert choose([("a", "x"), ("b", "y")], 0.01) == (["a/x"], ["b/y"])
    assert choose([("a", "x")], 0.1) == (["a/x"], [])
    assert choose([], 0.1) == ([], [])
    assert len(choose([("a", f"t{i}") for i in range(10)], 1.0)[0]) == 10


def test_split_steps() -> None:
    rest = list(range(10))
    assert split_steps(rest, [1 / 3, 2 / 3, 1]) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert split_steps(rest, [0.05, 1]) == [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]  # empty step dropped
    assert split_steps([1], [1 / 3, 2 / 3, 1]) == [[1]]
    assert split_steps([], [1]) == []


def test_a_healthy_topic_passes() -> None:
    base = Signals(backlog=10, oldest_age_s=1, delivered=500, failed=0, throttled=5, covered_s=10)
    now = Signals(backlog=12, oldest_age_s=2, delivered=480, failed=3, throttled=8, covered_s=10)
    assert judge(base, now, 50, Thresholds()) == []


def test_each_signal_against_its_baseline() -> None:
    limits = Thresholds()
    base = Signals(backlog=100, oldest_age_s=5, delivered=1000, failed=100, covered_s=10)
    grew = judge(base, Signals(backlog=100 + 30 * 10 + 1, covered_s=10, delivered=1000), 10, limits)
    assert [b.signal for b in grew] == ["backlog_growth"]
    assert grew[0].figure == 301 and grew[0].limit == 300
    aged = judge(
        base, Signals(backlog=100, oldest_age_s=70, delivered=1000, covered_s=10), 10, limits
    )
    assert [b.signal for b in aged] == ["oldest_age"]
    # 100 of 1100 failed before (9 %): 15 % now is a rise of 6 points, past 5.
    failed = Signals(backlog=100, delivered=850, failed=150, covered_s=10)
    assert [b.signal for b in judge(base, failed, 10, limits)] == ["failed_share"]
    throttled = Signals(backlog=100, throttled=301, delivered=1000, covered_s=10)
    assert [b.signal for b in judge(base, throttled, 10, limits)] == ["throttled"]


def test_delivered_against_quota_only_with_work_waiting() -> None:
    base = Signals(delivered=400, covered_s=10)  # 40/s before
    slow = Signals(backlog=500, delivered=100, covered_s=10)  # 10/s now, 500 waiting
    (b,) = judge(base, slow, 20, Thresholds(backlog_growth_s=1000))
    assert (b.signal, b.op, b.figure, b.limit) == ("delivered", "<", 10, 16)  # 0.8 x min(20, 40)
    idle = Signals(backlog=0, delivered=100, covered_s=10)  # less offered: not a breach
    assert judge(base, idle, 20, Thresholds()) == []


def test_the_reason_names_topic_signal_figure_and_limit() -> None:
    base = Signals(covered_s=5)
    breaches = judge(base, Signals(backlog=60, covered_s=5), 5, Thresholds(backlog_growth_s=2))
    text = reason("online/acme/orders", breaches)
    assert text.startswith("online/acme/orders: backlog_growth 60 > 10 (backlog grew by 60 jobs")


def test_a_running_rollout_without_heartbeat_reads_abandoned() -> None:
    rollout = {
        "id": "ro_1_abcdef",
        "state": "running",
        "updated_at": 100.0,
        "heartbeat_s": 2.0,
        "topics": [{"name": "x", "status": "healthy"}, {"name": "y", "status": "pending"}],
    }
    assert shown(rollout, 105.0)["state"] == "running"
    late = shown(rollout, 107.0)
    assert late["state"] == "abandoned" and "no heartbeat for 7 s" in late["reason"]
    assert late["topics_done"] == 1
    assert shown(rollout | {"state": "done"}, 1000.0)["state"] == "done"


def test_a_patch_merges_topics_by_name_and_beats() -> None:
    rollout = {
        "id": "r",
        "state": "running",
        "updated_at": 1.0,
        "phase": "canary",
        "topics": [{"name": "x", "status": "pending"}, {"name": "y", "status": "pending"}],
    }
    patch = {"phase": "step 1", "topics": [{"name": "y", "status": "healthy"}]}
    new = merged(rollout, patch, 9.0)
    assert new["phase"] == "step 1" and new["updated_at"] == 9.0
    assert [t["status"] for t in new["topics"]] == ["pending", "healthy"]
    assert rollout["phase"] == "canary"  # the stored one is not changed in place
