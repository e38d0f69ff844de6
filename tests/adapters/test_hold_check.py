"""The hold check built once per set of groups (adapters.redis_queue.hold_check): what it packs,
what it reads in a reply, and that reusing it never hides a change in the store."""

from __future__ import annotations

from redis.asyncio.connection import Connection

from adapters.redis_queue.hold_check import HoldCheck, build
from adapters.redis_queue.owner import TAKEN_TTL_S
from emq.core.model import GroupRef, Namespace, TopicRef
from tests.adapters.conftest import Subject, open_subject


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


# --------------------------------------------------------------------------- the taken stamp
# What the checks send is counted on the server (INFO commandstats: the session's server serves
# one test at a time), never timed.


async def _calls(raw: object, command: str) -> int:
    stats = await raw.info("commandstats")  # type: ignore[attr-defined]
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _sent(raw: object) -> tuple[int, int]:
    """(MGETs, GETs) the server answered so far."""
    return await _calls(raw, "mget"), await _calls(raw, "get")


async def test_a_probe_sends_only_the_stamp_while_nothing_is_taken(
    redis_url: str, test_id: str
) -> None:
    async with open_subject("redis", redis_url, test_id) as s:
        backend, raw = s.backend, s.raw
        groups = [group(i) for i in range(1200)]  # three MGETs (500 groups each)
        await backend.claim_groups([(g, 1) for g in groups], "a")
        holds = [(g, 1) for g in groups]
        before = await _sent(raw)
        assert await backend.check_holds(holds, "a", full=False) == set()  # new: full first
        first = await _sent(raw)
        assert (first[0] - before[0], first[1] - before[1]) == (3, 1)  # MGETs and the stamp
        for _ in range(5):
            assert await backend.check_holds(holds, "a", full=False) == set()
        probes = await _sent(raw)
        assert probes == (first[0], first[1] + 5)  # one GET each, no MGET
        assert await backend.check_holds(holds, "a") == set()  # full=True: MGETs again
        assert (await _sent(raw))[0] - probes[0] == 3
        # A claim taking a group from another holder, or between two others, moves no stamp
        # of "a": its probes stay probes.
        await backend.claim_groups([(group(5000), 1)], "c")
        await backend.claim_groups([(group(5000), 2)], "b")
        quiet = await _sent(raw)
        assert await backend.check_holds(holds, "a", full=False) == set()
        assert (await _sent(raw))[0] == quiet[0]


async def test_a_probe_after_a_claim_took_a_group_checks_in_full_at_once(
    redis_url: str, test_id: str
) -> None:
    async with open_subject("redis", redis_url, test_id) as s:
        backend, raw = s.backend, s.raw
        groups = [group(i) for i in range(1200)]
        await backend.claim_groups([(g, 1) for g in groups], "a")
        holds = [(g, 1) for g in groups]
        assert await backend.check_holds(holds, "a") == set()
        for taker in ("b", "c"):  # taken between two checks, twice: the stamp moves each time
            claimed = await backend.claim_groups([(groups[700], 2)], taker)
            assert claimed[0][0] is True  # type: ignore[index]  # contested
            mgets = (await _sent(raw))[0]
            assert await backend.check_holds(holds, "a", full=False) == {groups[700]}
            assert (await _sent(raw))[0] > mgets
            # Still lost, and checked in full, until the group leaves the list.
            mgets = (await _sent(raw))[0]
            assert await backend.check_holds(holds, "a", full=False) == {groups[700]}
            assert (await _sent(raw))[0] > mgets
        kept = holds[:700] + holds[701:]  # dropped: a new list, checked in full once
        assert await backend.check_holds(kept, "a", full=False) == set()
        mgets = (await _sent(raw))[0]
        assert await backend.check_holds(kept, "a", full=False) == set()
        assert (await _sent(raw))[0] == mgets  # a probe again
        # A claim recording no holder, and our own claim at a newer epoch: the epoch moved on,
        # and the probe sees it as the full check did.
        await backend.claim(groups[3], 2)
        assert await backend.check_holds(kept, "a", full=False) == {groups[3]}
        mine = [(groups[3], 2), *kept[4:]]
        assert await backend.check_holds(mine, "a", full=False) == set()
        await backend.claim(groups[4], 2, "a")
        assert await backend.check_holds(mine, "a", full=False) == {groups[4]}


async def test_what_no_claim_wrote_a_probe_misses_and_the_full_check_finds(
    redis_url: str, test_id: str
) -> None:
    async with open_subject("redis", redis_url, test_id) as s:
        backend, raw = s.backend, s.raw
        assert raw is not None
        groups = [group(i) for i in range(10)]
        await backend.claim_groups([(g, 1) for g in groups], "a")
        holds = [(g, 1) for g in groups]
        assert await backend.check_holds(holds, "a") == set()
        await raw.set(s.keys.holder(groups[2]), "z")  # by hand (or a write lost): no stamp
        assert await backend.check_holds(holds, "a", full=False) == set()  # the probe's limit
        assert await backend.check_holds(holds, "a", full=True) == {groups[2]}


async def test_the_stamp_only_grows_and_a_vanished_one_is_no_proof(
    redis_url: str, test_id: str
) -> None:
    async with open_subject("redis", redis_url, test_id) as s:
        backend, raw = s.backend, s.raw
        assert raw is not None
        taken = s.keys.taken("a")
        g = group(0)
        stamps = []
        for epoch in range(1, 6):
            await backend.claim(g, epoch, "a")
            await backend.claim(g, epoch, "b")  # taken from "a" each time
            stamps.append(int(await raw.get(taken)))
        assert stamps == sorted(set(stamps))  # strictly growing
        assert 0 < await raw.ttl(taken) <= TAKEN_TTL_S
        await raw.set(taken, str(2**52))  # ahead of the clock: the next one is still above it
        await backend.claim(g, 6, "a")
        await backend.claim(g, 6, "b")
        assert int(await raw.get(taken)) == 2**52 + 1
        holds = [(g, 7)]
        await backend.claim(g, 7, "a")
        assert await backend.check_holds(holds, "a") == set()
        await raw.delete(taken)  # expired: the probe finds another stamp, and checks in full
        mgets = (await _sent(raw))[0]
        assert await backend.check_holds(holds, "a", full=False) == set()
        assert (await _sent(raw))[0] == mgets + 1


async def test_on_a_cluster_every_check_is_full_and_no_stamp_is_written(
    cluster_subject: Subject,
) -> None:
    backend, raw = cluster_subject.backend, cluster_subject.raw
    assert raw is not None
    groups = [group(i) for i in range(30)]
    await backend.claim_groups([(g, 1) for g in groups], "a")
    holds = [(g, 1) for g in groups]
    assert await backend.check_holds(holds, "a", full=False) == set()
    await backend.claim_groups([(groups[7], 2)], "b")
    await raw.set(cluster_subject.keys.holder(groups[8]), "z")  # no claim: still seen
    assert await backend.check_holds(holds, "a", full=False) == {groups[7], groups[8]}
    assert [k async for k in raw.scan_iter(match=f"{cluster_subject.keys.prefix}:taken:*")] == []
