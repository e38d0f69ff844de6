"""Claims made in one loop iteration share one round trip (worker.holds), and what the batch
meets (a fenced group, an outage) reaches each claim; the groups' state is frozen out of the
garbage collector as the groups owned grow (worker.heap). Deterministic: the in-memory backend,
a counting wrapper, no timing."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from adapters.memory_queue import MemoryQueueBackend
from emq.core.errors import BackendUnavailable, Fenced
from emq.core.interfaces import Claimed
from emq.core.model import GroupRef, Namespace, TopicRef
from worker.heap import MIN_GROUPS, Refreezer
from worker.holds import Holds

TOPIC = TopicRef(Namespace.ONLINE, "t", "orders")


class Counting(MemoryQueueBackend):
    """The memory backend, counting claim_groups calls (and failing them when told)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.down = False

    async def claim_groups(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str
    ) -> list[Claimed | Fenced]:
        self.batches.append(len(groups))
        if self.down:
            raise BackendUnavailable("redis is down")
        return await super().claim_groups(groups, holder)


def holds(backend: Counting) -> Holds:
    return Holds("w1", backend, None, {}, lambda g, why: None)  # type: ignore[arg-type]


async def test_claims_of_one_iteration_share_one_call_and_each_gets_its_answer() -> None:
    backend = Counting()
    refs = [TOPIC.group(i) for i in range(5)]
    await backend.claim(refs[2], 9)  # a newer epoch than asked below
    h = holds(backend)
    answers = await asyncio.gather(*(h.claim(r, 1) for r in refs), return_exceptions=True)
    assert backend.batches == [5]
    assert isinstance(answers[2], Fenced)
    for n, answer in enumerate(answers):
        if n != 2:
            assert answer == (False, [None, None, None])
    assert await h.claim(refs[0], 1) == (False, [None, None, None])  # alone: its own call
    assert backend.batches == [5, 1]


async def test_an_outage_reaches_every_claim_of_the_batch_and_a_cancelled_one_is_skipped() -> None:
    backend = Counting()
    h = holds(backend)
    backend.down = True
    claims = [asyncio.ensure_future(h.claim(TOPIC.group(i), 1)) for i in range(3)]
    await asyncio.sleep(0)  # the claims are queued...
    claims[1].cancel()  # ...and one is given up before the batch is sent
    done = await asyncio.gather(*claims, return_exceptions=True)
    assert isinstance(done[0], BackendUnavailable) and isinstance(done[2], BackendUnavailable)
    assert isinstance(done[1], asyncio.CancelledError)
    backend.down = False
    assert await h.claim(TOPIC.group(1), 1) == (False, [None, None, None])


@pytest.fixture
def frozen() -> Iterator[None]:
    """A process that froze its start-up objects (worker.main.tune_gc), undone afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def test_the_groups_state_is_frozen_as_the_groups_owned_grow(frozen: None) -> None:
    r = Refreezer()
    assert not r.owned(MIN_GROUPS - 1)  # too few to be worth it
    assert r.owned(MIN_GROUPS)
    kept: list[Any] = [object() for _ in range(10)]  # (new tracked objects meanwhile)
    assert not r.owned(MIN_GROUPS + MIN_GROUPS // 5)  # grown by less than a quarter
    assert r.owned(MIN_GROUPS * 2)
    assert r.frozen_at == MIN_GROUPS * 2 and kept


def test_a_process_that_never_froze_is_left_alone() -> None:
    gc.unfreeze()  # (whatever an earlier test in this process froze)
    assert not Refreezer().owned(10 * MIN_GROUPS)
    assert gc.get_freeze_count() == 0
