"""The promise checker's keyed topics spread over their groups (emq.bench.mixed.key_names): a
group sends only its share of the quota, so keys (and the jobs with them) that hash to some
groups more than others leave a backlog the topic's quota cannot drain at its rate."""

from __future__ import annotations

import math
from collections import Counter

from capacity import group_count
from emq.api.enqueue import jump_hash
from emq.bench import mixed


def per_group(names: list[str], qps: int) -> list[int]:
    groups = group_count(qps)
    counts = Counter(jump_hash(name, groups) for name in names)
    return [counts[g] for g in range(groups)]


def need(qps: int) -> int:
    return math.ceil(qps / group_count(qps) * mixed.KEY_CYCLE_S)


def test_as_many_keys_in_every_group_and_one_per_cycle_of_its_share() -> None:
    for keys, qps in ((3, 1043), (20, 2341), (200, 105), (3, 8), (1, 3000)):
        names = mixed.key_names(keys, (qps, qps))
        counts = per_group(names, qps)
        assert len(set(counts)) == 1 and len(names) >= keys and min(counts) >= need(qps)
        assert len(set(names)) == len(names) and names == mixed.key_names(keys, (qps, qps))


def test_a_later_quota_gets_its_minimum_in_every_group_too() -> None:
    for keys, first, later in ((20, 2250, 3000), (3, 82, 164), (3, 1043, 521)):
        names = mixed.key_names(keys, (first, later))
        assert len(set(per_group(names, first))) >= 1 and min(per_group(names, later)) >= need(
            later
        )


def test_seed_3s_keyed_topic_has_three_keys_in_each_of_its_seven_groups() -> None:
    """Drawn as k0..k20 its 21 keys fell 5/5/5/3/2/1/0 into the groups (0.607 of its quota)."""
    assert sorted(per_group([f"k{n}" for n in range(21)], 1043)) == [0, 1, 2, 3, 5, 5, 5]
    t2 = next(t for t in mixed.make_spec(3).topics if t.name == "t2")
    assert t2.keyed == 1.0
    assert per_group(mixed.key_names(t2.keys, (t2.qps, t2.qps)), t2.qps) == [3] * 7
