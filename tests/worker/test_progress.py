from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from emq.core.interfaces import ZERO_OFFSET, Offset
from worker.progress import Progress


def test_commit_stops_at_the_oldest_unfinished_entry() -> None:
    p = Progress(ZERO_OFFSET)
    offsets = [Offset(1, i) for i in range(5)]
    for o in offsets:
        p.fetched(o)
    p.finished(offsets[1])
    p.finished(offsets[2])
    assert p.committable() is None
    p.finished(offsets[0])
    assert p.committable() == offsets[2]
    assert p.committed == offsets[2] and len(p) == 2
    p.finished(offsets[4])
    assert p.committable() is None
    p.finished(offsets[3])
    assert p.committable() == offsets[4]


@given(st.permutations(range(40)), st.integers(0, 40))
def test_commit_is_exactly_the_finished_prefix(order: list[int], how_many: int) -> None:
    p = Progress(ZERO_OFFSET)
    offsets = [Offset(10, i) for i in range(40)]
    for o in offsets:
        p.fetched(o)
    done = set(order[:how_many])
    for i in order[:how_many]:
        p.finished(offsets[i])
        p.committable()
    prefix = 0
    while prefix in done:
        prefix += 1
    assert p.committed == (offsets[prefix - 1] if prefix else ZERO_OFFSET)
    assert len(p) == 40 - how_many


def test_rewind_refetches_from_the_commit() -> None:
    p = Progress(Offset(5, 0))
    p.fetched(Offset(6, 0))
    p.fetched(Offset(7, 0))
    p.finished(Offset(6, 0))
    p.committable()
    p.rewind()
    assert p.last_fetched == Offset(6, 0) and len(p) == 0
