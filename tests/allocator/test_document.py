"""The assignment document: codec, epochs that only grow, who a moved group waits for."""

from __future__ import annotations

import pytest

from allocator.document import Document, Entry, advance, next_generation
from allocator.leader import member_weight, parse_marker
from allocator.ownership import parse_group
from emq.core.model import GroupRef, Namespace, TopicRef
from emq.core.naming import ZkPaths


def never(group: str, worker: str, epoch: int) -> bool:
    return False


def test_round_trip_and_compact_at_twenty_thousand_groups() -> None:
    groups = {
        f"online/tenant-{i % 700}/topic-{i % 5000}/g{i % 7}": Entry(
            f"worker-{i % 1000}", 10**12 + i
        )
        for i in range(20_000)
    }
    groups["online/a/b/g0"] = Entry("w1", 5, (("w0", 3), ("w9", 2)))
    doc = Document(1_732_000_000_000, "worker-1", 1732.5, groups)
    raw = doc.encode()
    assert Document.decode(raw) == doc
    assert len(raw) < 500_000  # well under ZooKeeper's 1 MB node limit
    assert Document.decode(b"") == Document()
    with pytest.raises(ValueError):
        Document.decode(b"not zlib")


def test_generation_only_grows_and_stays_above_the_wall_clock() -> None:
    assert next_generation(5, 1_000) == 1_000
    assert next_generation(2_000, 1_000) == 2_001  # a clock that went back does not matter


def test_moved_and_new_groups_get_the_new_generation_as_epoch() -> None:
    prev = Document(100, "w1", 0, {"g1": Entry("a", 50), "g2": Entry("b", 60)})
    new = advance(
        prev, {"g1": "a", "g2": "c", "g3": "a"}, generation=200, leader="w1", now=1, settled=never
    )
    assert new.groups["g1"] == Entry("a", 50)  # unchanged owner: same epoch, no waiting
    assert new.groups["g2"] == Entry("c", 200, (("b", 60),))  # waits for its former owner
    assert new.groups["g3"] == Entry("a", 200)  # new: nobody to wait for
    assert "g1" in prev.groups and new.generation == 200


def test_an_overtaken_handover_waits_for_every_former_owner_not_settled() -> None:
    d1 = Document(1, "l", 0, {"g": Entry("a", 1)})
    d2 = advance(d1, {"g": "b"}, generation=2, leader="l", now=0, settled=never)
    d3 = advance(d2, {"g": "c"}, generation=3, leader="l", now=0, settled=never)
    assert d3.groups["g"] == Entry("c", 3, (("a", 1), ("b", 2)))
    released_a = advance(
        d3, {"g": "c"}, generation=4, leader="l", now=0, settled=lambda g, w, e: w == "a"
    )
    assert released_a.groups["g"] == Entry("c", 3, (("b", 2),))  # settled ones are dropped
    assert d3.referenced() == {("g", 3), ("g", 1), ("g", 2)}


def test_release_marker_names_round_trip() -> None:
    paths = ZkPaths("/emq")
    group = "online/acme/odd%name@x/g3"
    path = paths.release_marker(Namespace.ONLINE, group, 17)
    assert path.startswith("/emq/online/released/") and path.count("/") == 4
    assert parse_marker(path.rsplit("/", 1)[1]) == (group, 17)
    assert parse_marker("garbage") is None


def test_group_names_parse_back() -> None:
    ref = GroupRef(TopicRef(Namespace.SANDBOX, "acme", "orders"), 4)
    assert parse_group(str(ref)) == ref
    assert parse_group("online/a/b") is None and parse_group("nope/a/b/g1") is None


def test_member_weight_is_read_defensively() -> None:
    assert member_weight(b'{"weight": 3}') == 3
    assert member_weight(b'{"weight": 0}') == member_weight(b"[]") == member_weight(None) == 1
