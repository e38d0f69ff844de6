"""``emq bench endpoints``'s verdict from the sinks' logs (pure: synthetic logs)."""

from __future__ import annotations

from emq.bench.endpoints import judge
from emq.bench.promises import Delivery


def _evenly(topic: str, per_s: int, seconds: int, t0: float = 1000.0) -> list[Delivery]:
    return [Delivery(t0 + i / per_s, f"{topic}{i}", topic) for i in range(per_s * seconds)]


def test_a_paced_endpoint_meets_the_target() -> None:
    first = _evenly("a", 60, 20)
    first += [Delivery(1012.5, "x", "a", 429)]  # one 429 after it settled
    doc = judge(first, _evenly("b", 40, 20), dead=0)
    assert doc["pass"], doc
    assert doc["first_max_requests_per_sliding_s"] in (61, 62)
    assert doc["second_delivered_per_s"] == 40.0


def test_a_burst_429s_a_dead_letter_or_a_starved_second_endpoint_fail() -> None:
    first = _evenly("a", 60, 20) + _evenly("a", 20, 1, t0=1015.0)  # 80 in one second
    throttled = [Delivery(1011.0 + i / 100, f"t{i}", "a", 429) for i in range(100)]
    doc = judge(first + throttled, _evenly("b", 10, 20), dead=1)
    assert doc["met"] == {
        "first_at_most_66_per_s": False,
        "first_at_least_85_percent_of_its_limit": True,
        "429_under_5_percent": False,
        "no_dlq": False,
        "second_keeps_its_share": False,
    }


def test_an_endpoint_held_below_its_limit_fails() -> None:
    doc = judge(_evenly("a", 24, 20), _evenly("b", 40, 20), dead=0)  # 24/s of a 60/s limit
    assert doc["first_delivered_share_of_limit"] < 0.85
    assert doc["met"]["first_at_least_85_percent_of_its_limit"] is False and not doc["pass"]
