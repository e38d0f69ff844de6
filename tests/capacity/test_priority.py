from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from capacity.priority import WeightedPlanner, plan_strict

counts = st.lists(st.integers(0, 50), min_size=3, max_size=3)


@given(budget=st.integers(0, 100), available=counts)
def test_strict_serves_in_priority_order(budget: int, available: list[int]) -> None:
    takes = plan_strict(budget, available)
    assert sum(takes) == min(budget, sum(available))
    assert all(0 <= t <= a for t, a in zip(takes, available, strict=True))
    for i in range(2):  # a lower queue gets something only if the higher one is drained
        if any(takes[j] for j in range(i + 1, 3)):
            assert takes[i] == available[i]


@given(budget=st.integers(0, 100), available=counts)
def test_weighted_never_wastes_budget_or_overdraws(budget: int, available: list[int]) -> None:
    takes = WeightedPlanner().plan(budget, available)
    assert sum(takes) == min(budget, sum(available))
    assert all(0 <= t <= a for t, a in zip(takes, available, strict=True))


def test_weighted_shares_6_3_1_even_one_at_a_time() -> None:
    planner = WeightedPlanner((6, 3, 1))
    total = [0, 0, 0]
    for _ in range(1000):
        for i, t in enumerate(planner.plan(1, [10, 10, 10])):
            total[i] += t
    assert total == [600, 300, 100]


def test_weighted_gives_an_idle_queues_share_to_the_others() -> None:
    planner = WeightedPlanner((6, 3, 1))
    total = [0, 0, 0]
    for _ in range(100):
        for i, t in enumerate(planner.plan(10, [0, 100, 100])):
            total[i] += t
    assert total == [0, 750, 250]


def test_aging_bound_serves_an_old_low_job_first() -> None:
    planner = WeightedPlanner((6, 3, 1), aging_s=5.0)
    assert planner.plan(1, [10, 10, 10], oldest_wait_s=[0.1, 0.1, 6.0]) == [0, 0, 1]
    assert planner.plan(2, [10, 10, 10], oldest_wait_s=[0.1, 7.0, 6.0]) == [0, 1, 1]
