"""``CoalescedPuts``: the puts of one loop iteration are one put underneath, and each caller gets
what its own put would have given (deterministic, on the in-memory queue store)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from adapters.memory_queue import MemoryQueueBackend
from emq.api import coalesce
from emq.api.coalesce import CoalescedPuts
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import PutItem, PutResult
from emq.core.model import GroupRef, Namespace, Priority, TopicRef

QUEUE = GroupRef(TopicRef(Namespace.ONLINE, "acme", "orders"), 0).queue(Priority.MEDIUM)


class Counting(MemoryQueueBackend):
    """The in-memory store, counting its puts (and failing them when told)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.fail: Exception | None = None

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        self.calls.append(len(items))
        await asyncio.sleep(0)  # a real store answers later
        if self.fail is not None:
            raise self.fail
        return await super().put(items)


def _items(tag: str, n: int, key: str | None = None) -> list[PutItem]:
    return [
        PutItem(QUEUE, f"{tag}-{i}", f"{tag}{i}".encode(), idempotency_key=key) for i in range(n)
    ]


async def test_puts_of_one_iteration_are_one_put_and_each_gets_its_own_results() -> None:
    store = Counting()
    puts = CoalescedPuts(store)
    results = await asyncio.gather(
        puts.put(_items("a", 1)), puts.put(_items("b", 3)), puts.put(_items("c", 1))
    )
    assert store.calls == [5]
    assert [[r.job_id for r in rs] for rs in results] == [["a-0"], ["b-0", "b-1", "b-2"], ["c-0"]]
    offsets = [r.offset for rs in results for r in rs if r.offset is not None]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5  # stored in the callers' order


async def test_puts_with_idempotency_keys_only_go_apart() -> None:
    store = Counting()
    puts = CoalescedPuts(store)
    first = await asyncio.gather(
        puts.put(_items("a", 1, key="k")),
        puts.put(_items("b", 1)),
        puts.put(_items("c", 2, key="j")),
    )
    assert store.calls == [3, 1]  # the keyed ones together (repeatable), the plain one alone
    # (c's two jobs share their key: the second is the first's duplicate, as without coalescing)
    assert [[r.job_id for r in rs] for rs in first] == [["a-0"], ["b-0"], ["c-0", "c-0"]]
    again = await asyncio.gather(puts.put(_items("d", 1, key="k")), puts.put(_items("e", 1)))
    assert again[0] == [PutResult("a-0", duplicate=True)]  # de-duplication as before


async def test_a_lone_put_goes_out_alone() -> None:
    store = Counting()
    puts = CoalescedPuts(store)
    assert [r.job_id for r in await puts.put(_items("a", 2))] == ["a-0", "a-1"]
    assert [r.job_id for r in await puts.put(_items("b", 1))] == ["b-0"]
    assert store.calls == [2, 1]


async def test_a_failed_put_fails_each_caller() -> None:
    store = Counting()
    store.fail = BackendUnavailable("redis is down")
    puts = CoalescedPuts(store)
    outcomes = await asyncio.gather(
        puts.put(_items("a", 1)), puts.put(_items("b", 1)), return_exceptions=True
    )
    assert [type(o) for o in outcomes] == [BackendUnavailable, BackendUnavailable]
    store.fail = None
    assert len(await puts.put(_items("c", 1))) == 1  # and the next flush is fine


async def test_a_cancelled_caller_leaves_the_others_their_results() -> None:
    store = Counting()
    puts = CoalescedPuts(store)
    gone = asyncio.ensure_future(puts.put(_items("a", 1)))
    kept = asyncio.ensure_future(puts.put(_items("b", 1)))
    await asyncio.sleep(0)  # both wait on the flush
    gone.cancel()
    assert [r.job_id for r in await kept] == ["b-0"]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert store.calls == [2]  # (its job was sent, as a put cancelled mid-way may store it)


async def test_a_flush_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coalesce, "MAX_ITEMS", 4)
    store = Counting()
    puts = CoalescedPuts(store)
    results = await asyncio.gather(*(puts.put(_items(t, 2)) for t in "abcde"))
    assert store.calls == [4, 4, 2]
    assert [rs[0].job_id for rs in results] == ["a-0", "b-0", "c-0", "d-0", "e-0"]
