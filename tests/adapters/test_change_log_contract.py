"""The change log's contract (emq.core.changes), run against the in-memory and the Redis log."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from adapters.memory_changes import MemoryChangeLog
from adapters.redis_changes import RedisChangeLog
from emq.core.changes import (
    Change,
    ChangeFilter,
    ChangeLog,
    ChangeRoute,
    diff,
    id_key,
    stale_fields,
)
from emq.core.errors import NotFound
from emq.core.naming import RedisKeys

RETENTION_S = 3600


class Clock:
    """Real time plus an offset the test moves (the Redis log's ids are the server's time)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture(params=["memory", "redis"])
async def make_log(
    request: pytest.FixtureRequest, redis_url: str, test_id: str
) -> AsyncIterator[Callable[..., ChangeLog]]:
    made: list[ChangeLog] = []

    def make(clock: Clock, max_entries: int = 1000) -> ChangeLog:
        if request.param == "memory":
            log: ChangeLog = MemoryChangeLog(
                retention_s=RETENTION_S, max_entries=max_entries, clock=clock
            )
        else:
            log = RedisChangeLog(
                aioredis.Redis.from_url(redis_url),
                RedisKeys(test_id),
                retention_s=RETENTION_S,
                max_entries=max_entries,
                owns_client=True,
                clock=clock,
            )
        made.append(log)
        return log

    yield make
    for log in made:
        await log.aclose()
    client = aioredis.Redis.from_url(redis_url)
    await client.delete(RedisKeys(test_id).changes())
    await client.aclose()


def change(tenant: str = "acme", topic: str | None = "orders", qps: int = 200) -> Change:
    return Change(
        at=time.time(),
        actor="admin",
        route=ChangeRoute.CLI,
        namespace="online",
        tenant=tenant,
        topic=topic,
        before={"qps": 100},
        after={"qps": qps},
        reason="peak",
    )


async def test_an_appended_change_is_read_back_whole(make_log: Callable[..., ChangeLog]) -> None:
    log = make_log(Clock())
    first, second = await log.append(change()), await log.append(change(qps=300))
    assert id_key(first.id) < id_key(second.id)
    assert await log.get(first.id) == first
    assert (await log.get(second.id)).to_dict() == change(qps=300).to_dict() | {
        "id": second.id,
        "at": second.at,
    }
    for unknown in ("1-0", "not-an-id", "99999999999999-0"):
        with pytest.raises(NotFound):
            await log.get(unknown)


async def test_listing_is_newest_first_filtered_and_paged(
    make_log: Callable[..., ChangeLog],
) -> None:
    log = make_log(Clock())
    ids = [
        (await log.append(change(tenant, topic))).id
        for tenant, topic in [("acme", "a"), ("beta", "b"), ("acme", None), ("acme", "a")]
    ]
    page = await log.page(ChangeFilter(limit=3))
    assert [c.id for c in page.changes] == ids[::-1][:3]
    assert page.next_cursor == ids[1]
    rest = await log.page(ChangeFilter(limit=3, cursor=page.next_cursor))
    assert [c.id for c in rest.changes] == [ids[0]] and rest.next_cursor is None
    acme = await log.page(ChangeFilter(tenant="acme"))
    assert [c.id for c in acme.changes] == [ids[3], ids[2], ids[0]]
    topic_a = await log.page(ChangeFilter(tenant="acme", topic="a", limit=1))
    assert [c.id for c in topic_a.changes] == [ids[3]] and topic_a.next_cursor == ids[3]
    assert (await log.page(ChangeFilter(namespace="sandbox"))).changes == []
    assert (await log.page(ChangeFilter(since=time.time() + 60))).changes == []
    assert len((await log.page(ChangeFilter(since=time.time() - 60))).changes) == 4


async def test_the_log_is_bounded_in_number_and_in_age(
    make_log: Callable[..., ChangeLog],
) -> None:
    clock = Clock()
    log = make_log(clock, 3)
    ids = [(await log.append(change(qps=q))).id for q in (1, 2, 3, 4, 5)]
    assert [c.id for c in (await log.page(ChangeFilter())).changes] == ids[:1:-1]
    with pytest.raises(NotFound):
        await log.get(ids[0])
    clock.offset = RETENTION_S + 5  # everything recorded so far is past the retention
    assert (await log.page(ChangeFilter())).changes == []
    with pytest.raises(NotFound):
        await log.get(ids[4])


def test_diff_and_stale_fields() -> None:
    before, after = diff(
        {"qps": 100, "groups": 1, "weight": 1}, {"qps": 300, "groups": 2, "weight": 1}
    )
    assert (before, after) == ({"qps": 100, "groups": 1}, {"qps": 300, "groups": 2})
    assert diff({"qps_cap": None}, {"qps_cap": None}) == ({}, {})
    done = Change(0, "admin", ChangeRoute.API, "online", "acme", "a", before, after)
    settable = ("qps", "weight", "burst")
    assert stale_fields(done, {"qps": 300, "groups": 5}, settable) == []  # groups: not settable
    assert stale_fields(done, {"qps": 250, "groups": 2}, settable) == ["qps"]
    assert Change.from_dict(done.to_dict()) == done
