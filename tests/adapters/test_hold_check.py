"""The hold check built once per set of groups (adapters.redis_queue.hold_check): what it packs,
what it reads in a reply, and that reusing it never hides a change in the store."""

from __future__ import annotations

from redis.asyncio.connection import Connection

from adapters.redis_queue.hold_check import HoldCheck, build
from emq.core.model import GroupRef, Namespace, TopicRef
from tests.adapters.conftest import Subject


def group(i: int) -> GroupRef:
    return TopicRef(Namespace.ONLINE, "acme", f"t{i}").group(i % 3)


def redis_py_packed(*commands: tuple[str | bytes, ...]) -> bytes:
    return b"".join(Connection().pack_commands(commands))


def check_of(holds: list[tuple[GroupRef, int]], cluster: bool = False) -> HoldCheck:
    keys = [(f"{g}:h".encode(), f"{g}:e".encode()) for g, _ in holds]
    return HoldCheck(tuple(holds), b"me", keys.__getitem__, [[0, 1], [2]], cluster)


def test_packed_is_what_redis_py_sends_even_for_long_keys() -> None:
    holds = [(group(0), 3), (group(1), 12), (group(2), 1)]
    keys = [(b"h" * 7000, b""), (b"{x}:holder", b"\xff"), (b"a", b"b")]
    check = HoldCheck(tuple(holds), b"me", keys.__getitem__, [[0, 1], [2]])
    expected = [(b"MGET", *keys[0], *keys[1]), (b"MGET", *keys[2])]
    assert check.packed == redis_py_packed(*expected)


def test_a_reply_is_read_as_lost_groups() -> None:
    holds = [(group(0), 3), (group(1), 12), (group(2), 1)]
    on_cluster = check_of(holds, cluster=True)
    assert on_cluster.packed == b"" and on_cluster.commands[1] == (
        "MGET",
        f"{group(2)}:h".encode(),
        f"{group(2)}:e".encode(),
    )
    check = check_of(holds)
    assert check.commands == []
    mgets = [(b"MGET", *c[1:]) for c in on_cluster.commands]
    assert check.packed == redis_py_packed(*mgets)  # what redis-py would send
    assert check.lost([[b"me", b"3", b"me", b"12"], [b"me", b"1"]]) == set()  # as expected
    # No holder recorded, an older or equal epoch spelled otherwise: still ours.
    assert check.lost([[None, b"3", b"me", b"012"], [b"me", b"0"]]) == set()
    assert check.lost([[b"me", b"4", b"other", b"12"], [None, None]]) == {group(0), group(1)}
    assert check.lost([[b"me", b"3", b"me", b"12"], [None, b"2"]]) == {group(2)}


def test_a_check_fits_only_the_same_groups_at_the_same_epochs() -> None:
    holds = [(group(0), 3), (group(1), 12), (group(2), 1)]
    check = check_of(holds)
    assert check.fits(tuple(holds), b"me")
    assert check.fits(tuple((g, e) for g, e in holds), b"me")  # equal, not the same objects
    assert not check.fits(tuple(holds), b"another")
    assert not check.fits(tuple(holds[:2]), b"me")
    assert not check.fits(((group(0), 4), *holds[1:]), b"me")  # claimed again, newer epoch
    assert not check.fits(((group(5), 3), *holds[1:]), b"me")


def test_build_splits_by_slot() -> None:
    holds = tuple((group(i), 1) for i in range(5))

    def per_slot(items, slot):  # type: ignore[no-untyped-def]
        out: dict[int, list[int]] = {}
        for i in items:
            out.setdefault(slot(i), []).append(i)
        return list(out.values())

    keys = lambda g: (f"{g}:h", f"{g}:e")  # noqa: E731
    check = build(holds, b"me", keys, per_slot, lambda k: int(k.split("/")[2][1:]) % 2, True)
    assert sorted(i for c in check.chunks for i in c) == list(range(5))
    assert len(check.commands) == len(check.chunks) == len(check.expected) == 2


async def test_a_reused_check_sees_every_change_in_the_store(redis_subject: Subject) -> None:
    backend, raw = redis_subject.backend, redis_subject.raw
    groups = [group(i) for i in range(1200)]  # more than one MGET (500 groups each)
    claimed = await backend.claim_groups([(g, 1) for g in groups], "a")
    assert all(isinstance(c, tuple) for c in claimed)
    holds = [(g, 1) for g in groups]  # one list, checked again and again, as the worker does
    assert await backend.check_holds(holds, "a") == set()
    assert await backend.check_holds(holds, "a") == set()
    answer = await backend.claim_groups([(groups[700], 2)], "b")
    assert isinstance(answer[0], tuple) and answer[0][0] is True  # contested
    assert await backend.check_holds(holds, "a") == {groups[700]}  # at once, same list
    await backend.claim(groups[3], 2)  # a claim that records no holder: the epoch moved on
    assert await backend.check_holds(holds, "a") == {groups[3], groups[700]}
    holds[3] = (groups[3], 2)  # changed in place: checked at its new epoch
    del holds[700]
    assert await backend.check_holds(holds, "a") == set()
    assert await backend.check_holds(holds, "b") == set(g for g, _ in holds) - {groups[3]}
    if redis_subject.kind == "redis":  # a connection broken under it: sent once more
        assert raw is not None
        await raw.client_kill_filter(_type="normal", skipme=True)
        assert await backend.check_holds(holds, "a") == set()
    await backend.release_holds(groups, "a")
    assert await backend.check_holds(holds, "a") == set()  # no holder: not lost
