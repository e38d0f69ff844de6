from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capacity import group_count, split_quota
from capacity.plan import (
    change_pct,
    growth_per_week,
    is_big_decrease,
    quota_step,
    recommended_quota,
    redis_memory_bytes,
    redis_ops_per_s,
    redis_shards,
    round_quota,
    size_topic,
    workers_needed,
)
from emq.core.errors import InvalidInput


@pytest.mark.parametrize(
    ("rate", "quota"),
    [
        (0.0, 1),
        (0.3, 1),
        (1.0, 1),
        (7.3, 8),
        (12.2, 13),
        (20.0, 20),
        (100.0, 100),
        (100 * 1.2, 120),  # 120.00000000000001 must not round up to 125
        (137.0, 140),
        (999.0, 1000),
        (1000.0, 1000),
        (1003.0, 1050),
        (12_345.0, 12_500),
    ],
)
def test_quotas_round_up_to_a_sensible_step(rate: float, quota: int) -> None:
    assert round_quota(rate) == quota


@given(st.floats(min_value=0.001, max_value=1e7, allow_nan=False))
def test_rounding_never_lowers_and_adds_at_most_about_five_percent(rate: float) -> None:
    quota = round_quota(rate)
    assert quota >= rate - 1e-6 * rate
    assert quota <= max(math.ceil(rate), rate * 1.05 + 1)
    assert quota % quota_step(rate) == 0 or quota == 1


def test_headroom_multiplies_the_p99() -> None:
    assert recommended_quota(100.0, 1.0) == 100
    assert recommended_quota(100.0, 1.5) == 150
    with pytest.raises(InvalidInput):
        recommended_quota(100.0, 0)


def test_a_topic_peaking_at_1000_qps_gets_seven_groups_at_headroom_one() -> None:
    sizing = size_topic(1000.0, 500, headroom=1.0)
    assert (sizing.qps, sizing.groups) == (1000, 7)
    assert sizing.group_qps == split_quota(1000)
    assert size_topic(100.0, 500, headroom=1.0).groups == 1


def test_an_idle_topic_keeps_its_quota() -> None:
    sizing = size_topic(0.0, 450, idle=True)
    assert (sizing.qps, sizing.groups, sizing.idle) == (450, group_count(450), True)
    assert size_topic(0.0, 0, idle=True).qps == 1  # unknown quota: the minimum


def test_groups_follow_the_split_rule_for_any_cap() -> None:
    sizing = size_topic(1000.0, 0, headroom=1.0, max_group_qps=100)
    assert sizing.groups == 10 == len(sizing.group_qps)


@pytest.mark.parametrize(
    ("demand", "capacity", "spare", "workers"),
    [
        (0, 1000, 1, 2),
        (999, 1000, 1, 2),
        (1000, 1000, 1, 2),
        (1001, 1000, 1, 3),
        (5000, 1000, 0, 5),
    ],
)
def test_workers_are_n_plus_spare(demand: float, capacity: float, spare: int, workers: int) -> None:
    assert workers_needed(demand, capacity, spare) == workers


def test_workers_reject_nonsense() -> None:
    with pytest.raises(InvalidInput):
        workers_needed(10, 0)
    with pytest.raises(InvalidInput):
        workers_needed(10, 100, spare=-1)


def test_redis_shards_cover_both_operations_and_memory() -> None:
    assert redis_shards(0, 0) == 1
    assert redis_shards(80_000, 0, shard_ops=80_000) == 1
    assert redis_shards(80_001, 0, shard_ops=80_000) == 2
    assert redis_shards(1, 17 * 1024**3, shard_memory_bytes=8 * 1024**3) == 3
    assert redis_ops_per_s(1000) == 4000
    assert redis_memory_bytes(1000, 0, job_bytes=1000) == 1000 * 1000 * 1.5


def test_change_and_the_force_rule() -> None:
    assert change_pct(100, 150) == 50.0
    assert change_pct(0, 10) is None
    assert not is_big_decrease(100, 50)  # exactly half is allowed
    assert is_big_decrease(100, 49)
    assert not is_big_decrease(0, 10)


def test_growth_is_a_share_of_the_mean_per_week() -> None:
    assert growth_per_week(1.0, 70.0) == pytest.approx(0.1)
    assert growth_per_week(1.0, 0.0) is None
