"""The worker's hold check loop (worker.holds) against a real Redis: a group another holder
claims is dropped by the next check, probes are what is sent while nothing was taken, and a
full check still comes at least every FULL_HOLD_CHECK_S. What is sent is recorded by a thin
wrapper and counted on the server (INFO commandstats), never timed: the loop's periods are
shortened only so that the test is quick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from adapters.redis_queue import RedisQueueBackend
from emq.core.model import GroupRef, Namespace, TopicRef
from tests.adapters.conftest import Subject, open_subject
from worker import holds as holds_module
from worker.holds import Holds

TOPIC = TopicRef(Namespace.ONLINE, "acme", "orders")
CHECK_S, FULL_S = 0.02, 0.2  # the loop's periods in this test (HOLD_CHECK_S, FULL_HOLD_CHECK_S)


@dataclass(eq=False)  # compared by identity, as GroupState is
class Held:
    """What the hold check reads of a GroupState."""

    ref: GroupRef
    epoch: int
    dropped: bool = False


@dataclass
class Check:
    full: bool
    lost: set[GroupRef]


@dataclass
class Recording:
    """The backend's check_holds, recording each check as it answers; the rest passes on."""

    backend: RedisQueueBackend
    checks: list[Check] = field(default_factory=list)
    started: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def check_holds(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str, full: bool = True
    ) -> set[GroupRef]:
        self.started += 1
        lost = await self.backend.check_holds(groups, holder, full)
        self.checks.append(Check(full, lost))
        self.answered.set()
        return lost

    async def next_answer(self) -> None:
        self.answered.clear()
        await asyncio.wait_for(self.answered.wait(), 5)

    def __getattr__(self, name: str) -> object:
        return getattr(self.backend, name)


class Vouches:
    def __init__(self) -> None:
        self.until: list[float] = []

    def vouched(self, until: float) -> None:
        self.until.append(until)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holds_module, "HOLD_CHECK_S", CHECK_S)
    monkeypatch.setattr(holds_module, "FULL_HOLD_CHECK_S", FULL_S)


@pytest.fixture
async def subject(redis_url: str, test_id: str) -> AsyncIterator[Subject]:
    async with open_subject("redis", redis_url, test_id) as s:
        yield s


async def _mgets(subject: Subject) -> int:
    assert subject.raw is not None
    stats = await subject.raw.info("commandstats")
    return int(stats.get("cmdstat_mget", {}).get("calls", 0))


async def _holding(
    subject: Subject, n: int
) -> tuple[Holds, Recording, dict[str, Held], list[tuple[Held, str]]]:
    """A Holds of ``n`` groups it claimed, its check loop not started yet."""
    assert isinstance(subject.backend, RedisQueueBackend)
    queues = Recording(subject.backend)
    groups: dict[str, Held] = {}
    dropped: list[tuple[Held, str]] = []

    def drop(g: Held, why: str) -> None:
        g.dropped = True
        dropped.append((g, why))

    h = Holds("w1", queues, Vouches(), groups, drop)  # type: ignore[arg-type]
    refs = [TOPIC.group(i) for i in range(n)]
    await asyncio.gather(*(h.claim(r, 1) for r in refs))
    groups.update((str(r), Held(r, 1)) for r in refs)
    return h, queues, groups, dropped


async def _taken(subject: Subject, queues: Recording, ref: GroupRef, holder: str) -> int:
    """Claim ``ref`` for ``holder``; the number of checks sent before the claim was answered."""
    claimed = await subject.backend.claim_groups([(ref, 2)], holder)
    assert claimed[0][0] is True  # type: ignore[index]  # contested: ours never let go
    return queues.started


async def _found_by(queues: Recording, ref: GroupRef, since: int, sent_before: int) -> int:
    """The check that found ``ref`` lost: one of those answered from ``since`` on, at the
    latest the first one sent after the claim (number ``sent_before``, from 0)."""
    while len(queues.checks) <= sent_before:
        await queues.next_answer()
    return next(n for n in range(since, sent_before + 1) if ref in queues.checks[n].lost)


async def test_a_group_claimed_by_another_holder_is_dropped_by_the_next_check(
    subject: Subject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holds_module, "HOLD_CHECK_S", 0.1)  # claims fall between two checks
    monkeypatch.setattr(holds_module, "FULL_HOLD_CHECK_S", 60.0)  # only the first one is full
    h, queues, groups, dropped = await _holding(subject, 600)
    loop = asyncio.ensure_future(h.check_loop())
    try:
        for n, index in enumerate((17, 300, 599)):
            # Taken between two checks: right after one answered, while the loop sleeps...
            await queues.next_answer()
            since = len(queues.checks)
            ref = TOPIC.group(index)
            sent_before = await _taken(subject, queues, ref, f"other{n}")
            # ...and the next check (a probe, by the worker's choice) finds it.
            found = await _found_by(queues, ref, since, sent_before)
            assert not queues.checks[found].full and queues.checks[found].lost == {ref}
            assert dropped[-1] == (groups[str(ref)], "fenced: claimed by another worker")
        # Taken at any moment (a check may be in flight): found by the first check sent after.
        await asyncio.sleep(0.05)
        ref = TOPIC.group(42)
        since = len(queues.checks)
        await _found_by(queues, ref, since, await _taken(subject, queues, ref, "other"))
        assert [g.ref for g, _ in dropped] == [TOPIC.group(i) for i in (17, 300, 599, 42)]
        assert [c.full for c in queues.checks].count(True) == 1
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_probes_are_sent_while_nothing_is_taken_and_a_full_check_still_comes(
    subject: Subject,
) -> None:
    h, queues, groups, dropped = await _holding(subject, 1200)  # three MGETs per full check
    start = await _mgets(subject)
    loop = asyncio.ensure_future(h.check_loop())
    try:
        while len(queues.checks) < 3 * FULL_S / CHECK_S:  # about three full periods
            await queues.next_answer()
        # The first check, and then one at least every FULL_S; the others are probes.
        assert queues.checks[0].full
        fulls = sum(c.full for c in queues.checks)
        assert fulls >= 3 and fulls < len(queues.checks) / 3
        assert not any(c.lost for c in queues.checks)
        # On the server: MGETs for the full checks only, none for the probes.
        before = sum(c.full for c in queues.checks)
        mgets = await _mgets(subject) - start
        after = sum(c.full for c in queues.checks)
        assert 3 * before <= mgets <= 3 * (after + 1)  # (+1: one in flight)
        # The safety net: a change no claim made (no stamp: probes cannot see it) is found by
        # the next full check, at most FULL_S / CHECK_S + 1 checks later.
        assert subject.raw is not None
        lost = TOPIC.group(5)
        await subject.raw.set(subject.keys.holder(lost), "by hand")
        answered = len(queues.checks)
        while not dropped:
            await queues.next_answer()
        finder = next(n for n, c in enumerate(queues.checks) if c.lost)
        assert queues.checks[finder].full and queues.checks[finder].lost == {lost}
        assert finder - answered <= FULL_S / CHECK_S + 2
        assert dropped == [(groups[str(lost)], "fenced: claimed by another worker")]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
