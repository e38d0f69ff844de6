"""Fleet membership, election, guarded writes, handover and session states on real ZooKeeper.

Members run in this process (each with its own ZooKeeper session) with a stand-in worker; the
end-to-end behaviour with real ``emq worker`` processes is in ``test_fleet_e2e.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kazoo.client import KazooClient

from adapters import zk
from allocator.document import Document, Entry
from allocator.election import Election
from allocator.leader import Deposed, Leader
from allocator.settings import FleetSettings
from emq.core.model import GroupRef
from emq.core.naming import ZkPaths
from tests.allocator.conftest import (
    NS,
    SESSION_S,
    Fleet,
    Member,
    Proxy,
    eventually,
    expire_session,
)

LEASE_S = SESSION_S * 2 / 3


def document(client: KazooClient, fleet: Fleet) -> Document:
    data, _ = client.get(ZkPaths(fleet.settings.zk_root).assignments(NS))
    return Document.decode(data)


async def test_three_members_one_leader_every_group_owned_once(
    fleet: Fleet, zk_client: KazooClient
) -> None:
    groups = await fleet.topics({"a": 7, "b": 5, "c": 1, "d": 12})
    members = [await fleet.member(f"w{i}") for i in range(3)]
    # Members join one by one: the first may hold everything for a moment (exactly once, but
    # unbalanced) until the leader sees the third; the promise is both, once the fleet settles.
    await eventually(
        lambda: fleet.exactly_once(groups)
        and sorted(len(m.owned) for m in members)[0] >= 5,  # 25 groups, none left idle
        10,
    )
    assert len(fleet.leaders()) == 1
    doc = document(zk_client, fleet)
    assert {str(g) for g in groups} == set(doc.groups)
    for m in members:  # what each holds is what the document gives it, at its epoch
        assert {str(g): e for g, e in m.owned.items()} == {
            g: e.epoch for g, e in doc.of(m.id).items()
        }
        assert m.fleet.may_dispatch() and m.fleet.may_fetch()
    assert sorted(len(m.owned) for m in members)[0] >= 5
    # A new topic's groups are assigned too.
    more = await fleet.topics({"e": 3})
    await eventually(lambda: fleet.exactly_once(groups + more), 5)


@pytest.mark.serial
async def test_leader_failover_and_the_generation_grows(
    fleet: Fleet, zk_client: KazooClient
) -> None:
    groups = await fleet.topics({"a": 10, "b": 10})
    for i in range(3):
        await fleet.member(f"w{i}")
    await eventually(lambda: fleet.exactly_once(groups) and len(fleet.leaders()) == 1, 10)
    before = document(zk_client, fleet)
    [leader] = fleet.leaders()
    fleet.members.remove(leader)
    started = time.monotonic()
    await leader.stop()  # leaves: markers written, session closed
    took = await eventually(lambda: len(fleet.leaders()) == 1, 10)
    await eventually(lambda: fleet.exactly_once(groups), 10)
    after = document(zk_client, fleet)
    assert after.generation > before.generation
    assert after.leader == fleet.leaders()[0].id != leader.id
    assert leader.id not in {e.owner for e in after.groups.values()}
    assert took < 3.0, took
    # It left release markers, so nobody waited out a grace period for its groups.
    assert time.monotonic() - started < SESSION_S + 1.0


async def test_a_deposed_leader_cannot_write(fleet: Fleet, zk_client: KazooClient) -> None:
    paths = ZkPaths(fleet.settings.zk_root)
    client = KazooClient(hosts=fleet.settings.zk_hosts, timeout=SESSION_S)
    await asyncio.to_thread(client.start, 10)
    try:
        election = Election(client, paths.leader(NS), "old", request_timeout_s=5)
        node = await election.campaign()
        leader = Leader(
            client,
            paths,
            NS,
            "old",
            node,
            FleetSettings(),
            groups=lambda: [],
            topics_changed=zk.Poke(),
            grace_s=1.0,
        )
        zk_client.ensure_path(paths.assignments(NS))
        doc = Document(5, "old", 0, {"online/acme/a/g0": Entry("w1", 5)})
        version = await leader._write(doc, 0)  # while it holds its node: written
        assert document(zk_client, fleet) == doc
        zk_client.delete(node)  # as when its session expired while it was paused
        with pytest.raises(Deposed):
            await leader._write(Document(6, "old", 0, {}), version)
        assert document(zk_client, fleet) == doc  # nothing written
    finally:
        await asyncio.to_thread(lambda: (client.stop(), client.close()))


async def test_a_new_owner_waits_for_the_release(fleet: Fleet, zk_client: KazooClient) -> None:
    groups = await fleet.topics({"a": 20})
    old = await fleet.member("w0", release_delay_s=0.5)
    await eventually(lambda: fleet.exactly_once(groups), 10)
    new = await fleet.member("w1")
    await eventually(lambda: bool(new.owned) and fleet.exactly_once(groups), 10)
    moved = set(new.owned)
    assert moved and not moved & set(old.owned)
    released = {g: t for t, g, _ in old.releases}
    for t, snap in new.snapshots:  # the new owner was offered each group only after its release
        for g in snap.groups:
            assert g in released and t >= released[g], (g, t, released.get(g))
    doc = document(zk_client, fleet)
    assert all(doc.groups[str(g)].epoch > 0 for g in moved)
    assert all(doc.groups[str(g)].epoch > e for _, g, e in old.releases)  # epochs grew


@pytest.mark.serial
async def test_a_dead_owner_is_waited_out_for_the_grace_period(fleet: Fleet) -> None:
    groups = await fleet.topics({"a": 12})
    doomed = await fleet.member("w0")
    await eventually(lambda: fleet.exactly_once(groups), 10)
    heir = await fleet.member("w1")
    await eventually(lambda: bool(heir.owned), 10)
    theirs = set(doomed.owned)
    # Kill the member's session without a goodbye: no release markers, node gone at expiry.
    for t in doomed.tasks:
        t.cancel()
    fleet.members.remove(doomed)
    killed = time.monotonic()
    await asyncio.to_thread(expire_session, fleet.settings.zk_hosts, doomed.fleet._client)
    await eventually(lambda: theirs <= set(heir.owned), 10)
    took = time.monotonic() - killed
    assert took >= heir.fleet.grace_s, took  # not before the grace period
    assert took < heir.fleet.grace_s + 2.0, took
    await doomed.fleet.aclose()


async def test_session_expiry_self_fences_then_the_member_rejoins(fleet: Fleet) -> None:
    groups = await fleet.topics({"a": 6})
    m = await fleet.member("w0")
    await eventually(lambda: fleet.exactly_once(groups), 10)
    client = m.fleet._client
    old_session = client.client_id
    await asyncio.to_thread(expire_session, fleet.settings.zk_hosts, client)
    await eventually(lambda: not m.owned, 5)  # dropped everything
    assert any(not snap.groups for _, snap in m.snapshots)
    await eventually(lambda: client.client_id != old_session and fleet.exactly_once(groups), 10)
    assert m.fleet.may_dispatch()


@pytest.mark.serial
async def test_a_blip_keeps_dispatching_and_a_long_cut_self_fences(
    fleet: Fleet, proxy: Proxy
) -> None:
    groups = await fleet.topics({"a": 6})
    chroot = fleet.settings.zk_hosts.split("/", 1)[1]
    m = await fleet.member("w0", hosts=f"127.0.0.1:{proxy.port}/{chroot}")
    await eventually(lambda: fleet.exactly_once(groups), 10)
    held = dict(m.owned)
    try:
        await _blip_then_stall(m, proxy, held)
    finally:
        fleet.members.remove(m)
        await m.stop()  # before the proxy goes: kazoo's stop would wait for a server


async def _blip_then_stall(m: Member, proxy: Proxy, held: dict[GroupRef, int]) -> None:
    # A dropped connection that comes straight back: fetching pauses, dispatching never stops.
    dispatch_seen: list[bool] = []
    fetch_seen: list[bool] = []
    proxy.drop()
    for _ in range(50):
        dispatch_seen.append(m.fleet.may_dispatch())
        fetch_seen.append(m.fleet.may_fetch())
        await asyncio.sleep(0.01)
    await eventually(m.fleet.may_fetch, 5)
    assert all(dispatch_seen) and not all(fetch_seen) and m.owned == held
    # Stalled past the lease: it stops dispatching and drops its groups, all before the
    # session could expire; resumed in time, the same session carries on at the same epochs.
    proxy.pause()
    paused = time.monotonic()
    await eventually(lambda: not m.fleet.may_dispatch(), LEASE_S + 0.5)
    stopped = time.monotonic() - paused
    await eventually(lambda: not m.owned, 1.0)
    assert stopped <= LEASE_S + 0.1, stopped
    await asyncio.sleep(max(0.0, SESSION_S * 0.85 - (time.monotonic() - paused)))
    proxy.resume()
    await eventually(lambda: m.owned == held and m.fleet.may_dispatch(), 5)


@pytest.mark.serial
async def test_cut_off_from_zookeeper_a_member_goes_on_while_the_store_vouches(
    fleet: Fleet, proxy: Proxy
) -> None:
    groups = await fleet.topics({"a": 4})
    chroot = fleet.settings.zk_hosts.split("/", 1)[1]
    m = await fleet.member("w0", hosts=f"127.0.0.1:{proxy.port}/{chroot}")
    await eventually(lambda: fleet.exactly_once(groups), 10)
    held = dict(m.owned)
    vouching = True

    async def vouch() -> None:  # what the worker does after each successful check of its holds
        while vouching:
            m.fleet.vouched(time.monotonic() + 1.0)
            await asyncio.sleep(0.25)

    task = asyncio.create_task(vouch())
    try:
        proxy.drop()
        proxy.pause()  # reconnections get nowhere either
        cut = time.monotonic()
        seen = []
        while time.monotonic() - cut < LEASE_S + 0.5:  # well past ZooKeeper's lease
            seen.append(m.fleet.may_dispatch() and m.fleet.may_fetch())
            await asyncio.sleep(0.02)
        assert all(seen) and m.owned == held, (seen.count(False), m.owned)
        vouching = False  # the store goes quiet too: it self-fences once the last word ends
        await eventually(lambda: not m.fleet.may_dispatch() and not m.owned, 1.5)
    finally:
        vouching = False
        await task
        proxy.resume()
    await eventually(lambda: fleet.exactly_once(groups), 10)  # and it comes back
    fleet.members.remove(m)
    await m.stop()
