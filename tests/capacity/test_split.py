from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capacity import group_count, split_quota
from emq.core.errors import InvalidInput


@pytest.mark.parametrize(
    ("qps", "groups"), [(1, 1), (100, 1), (150, 1), (151, 2), (300, 2), (301, 3), (1000, 7)]
)
def test_known_splits(qps: int, groups: int) -> None:
    assert group_count(qps) == groups
    assert len(split_quota(qps)) == groups


def test_a_1000_qps_topic_has_seven_near_equal_groups() -> None:
    assert split_quota(1000) == (143, 143, 143, 143, 143, 143, 142)


@given(
    qps=st.integers(min_value=1, max_value=2_000_000),
    cap=st.integers(min_value=1, max_value=10_000),
)
def test_split_sums_exactly_and_respects_the_cap(qps: int, cap: int) -> None:
    quotas = split_quota(qps, cap)
    assert len(quotas) == math.ceil(qps / cap) == group_count(qps, cap)
    assert sum(quotas) == qps
    assert max(quotas) <= cap
    assert min(quotas) >= 1
    assert max(quotas) - min(quotas) <= 1
    assert list(quotas) == sorted(quotas, reverse=True)


@given(qps=st.integers(min_value=1, max_value=100_000))
def test_raising_a_quota_never_removes_groups(qps: int) -> None:
    assert group_count(qps + 1) >= group_count(qps)


@pytest.mark.parametrize(("qps", "cap"), [(0, 150), (-5, 150), (1.5, 150), (True, 150), (10, 0)])
def test_bad_quota_is_refused(qps: object, cap: int) -> None:
    with pytest.raises(InvalidInput):
        split_quota(qps, cap)  # type: ignore[arg-type]


@given(
    qps=st.integers(min_value=1, max_value=100_000),
    extra=st.integers(min_value=0, max_value=50),
)
def test_a_topic_may_keep_more_groups_than_it_needs(qps: int, extra: int) -> None:
    groups = min(qps, group_count(qps) + extra)
    quotas = split_quota(qps, groups=groups)
    assert len(quotas) == groups
    assert sum(quotas) == qps
    assert min(quotas) >= 1 and max(quotas) <= 150


@pytest.mark.parametrize(("qps", "groups"), [(1000, 6), (5, 6), (100, 0)])
def test_a_group_count_outside_the_bounds_is_refused(qps: int, groups: int) -> None:
    with pytest.raises(InvalidInput) as info:
        split_quota(qps, groups=groups)
    assert info.value.field == "groups"
