"""The division of a tenant's cap among its topics (capacity.tenant_share)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from capacity.tenant_share import TopicDemand, divide, split


def busy(quota: int = 200, weight: int = 1, groups: int = 2) -> TopicDemand:
    return TopicDemand(quota, weight, groups, backlogged=True)


def idle(quota: int = 200, rate: float = 0.0, groups: int = 2) -> TopicDemand:
    return TopicDemand(quota, 1, groups, backlogged=False, rate=rate)


def test_equal_weights_share_equally() -> None:
    assert divide(300, {"a": busy(), "b": busy(), "c": busy()}) == {"a": 100, "b": 100, "c": 100}


def test_a_drained_topic_leaves_its_share_to_the_busy_ones() -> None:
    shares = divide(300, {"a": busy(), "b": busy(), "c": idle()})
    assert shares == {"a": 149, "b": 149, "c": 2}  # c keeps one per group to start again


def test_weights_and_own_quotas() -> None:
    assert divide(300, {"a": busy(weight=2), "b": busy()}) == {"a": 200, "b": 100}
    # a topic's own quota caps its share; the rest goes to the others
    assert divide(300, {"a": busy(quota=50, groups=1), "b": busy()}) == {"a": 50, "b": 200}


def test_spare_cap_gives_quiet_topics_room_up_to_their_quota() -> None:
    shares = divide(300, {"a": busy(quota=100, groups=1), "b": idle(quota=100, rate=10)})
    assert shares == {"a": 100, "b": 100}


def test_at_least_one_per_group_even_under_a_tiny_cap() -> None:
    assert divide(1, {"a": busy(groups=2)}) == {"a": 2}
    assert split(3, 2) == (2, 1)
    assert split(0, 3) == (1, 1, 1)


demands = st.builds(
    TopicDemand,
    quota=st.integers(1, 500),
    weight=st.integers(1, 10),
    groups=st.just(1),
    backlogged=st.booleans(),
    rate=st.floats(0, 600),
)


@given(st.integers(1, 2000), st.dictionaries(st.sampled_from("abcdefgh"), demands, min_size=1))
def test_never_above_the_cap_nor_a_quota(cap: int, topics: dict[str, TopicDemand]) -> None:
    shares = divide(cap, topics)
    assert set(shares) == set(topics)
    assert all(1 <= shares[n] <= max(1, t.quota) for n, t in topics.items())
    assert sum(shares.values()) <= max(cap, len(topics))  # (one per group at least)
    # deterministic: the same inputs in another order give the same division
    assert divide(cap, dict(reversed(list(topics.items())))) == shares
