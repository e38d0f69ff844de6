"""In-process fleet members on the real ZooKeeper (the test's chroot), and a pausable TCP proxy.

* :class:`Member` is a :class:`~allocator.fleet.FleetAssignment` with a stand-in worker that
  does what :class:`~worker.runtime.Worker` does with snapshots: it takes the groups offered and
  releases (after ``release_delay_s``) those no longer offered. It records every snapshot.
* :class:`Proxy` sits between one member and ZooKeeper so a test can cut the connection
  (``drop``) or stall it (``pause``/``resume``) without touching the shared server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kazoo.client import KazooClient

from allocator.fleet import FleetAssignment, join
from allocator.settings import FleetSettings
from emq.compose import open_config
from emq.core.interfaces import ConfigStore, OwnedGroups
from emq.core.model import GroupRef, Namespace, Tenant, Topic, TopicRef
from emq.core.settings import Settings

NS = Namespace.ONLINE
SESSION_S = 2.0  # ZooKeeper ticks are 500 ms in tests: 2 s sessions are allowed


async def eventually(
    predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.02
) -> float:
    """Wait until ``predicate()``; returns the seconds it took. Fails the test on time-out."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(step_s)
    return time.monotonic() - started


@dataclass
class Member:
    fleet: FleetAssignment
    release_delay_s: float = 0.0
    owned: dict[GroupRef, int] = field(default_factory=dict)
    snapshots: list[tuple[float, OwnedGroups]] = field(default_factory=list)
    releases: list[tuple[float, GroupRef, int]] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.fleet.id

    async def follow(self) -> None:
        async for snap in self.fleet.updates():
            self.snapshots.append((time.monotonic(), snap))
            for g, e in list(self.owned.items()):
                if snap.groups.get(g) != e:
                    await asyncio.sleep(self.release_delay_s)
                    del self.owned[g]
                    self.releases.append((time.monotonic(), g, e))
                    await self.fleet.release(g, e)
            self.owned.update(snap.groups)

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.fleet.aclose()


@dataclass
class Fleet:
    settings: Settings
    config: ConfigStore
    members: list[Member] = field(default_factory=list)

    async def topics(self, groups: dict[str, int]) -> list[GroupRef]:
        """Create topics with the given group counts; returns every group."""
        refs: list[GroupRef] = []
        for name, count in groups.items():
            topic = Topic(TopicRef(NS, "acme", name), qps=100 * count, groups=count)
            await self.config.create_topic(topic)
            refs += topic.group_refs()
        return refs

    async def member(
        self,
        worker_id: str,
        *,
        hosts: str | None = None,
        release_delay_s: float = 0.0,
        **fleet_settings: Any,
    ) -> Member:
        fleet = await join(
            hosts or self.settings.zk_hosts,
            root=self.settings.zk_root,
            namespace=NS,
            worker_id=worker_id,
            config=self.config,
            settings=FleetSettings(**fleet_settings),
            session_timeout_s=SESSION_S,
        )
        m = Member(fleet, release_delay_s)
        m.tasks = [asyncio.create_task(fleet.run()), asyncio.create_task(m.follow())]
        self.members.append(m)
        return m

    def owners(self) -> dict[GroupRef, list[str]]:
        """Who currently holds each group (the stand-in workers' own view)."""
        out: dict[GroupRef, list[str]] = {}
        for m in self.members:
            for g in m.owned:
                out.setdefault(g, []).append(m.id)
        return out

    def leaders(self) -> list[Member]:
        return [m for m in self.members if m.fleet.is_leader]

    def exactly_once(self, groups: list[GroupRef], among: list[Member] | None = None) -> bool:
        holders = self.owners()
        names = {m.id for m in among or self.members}
        return all(
            holders.get(g, []) and set(holders[g]) <= names and len(holders[g]) == 1 for g in groups
        )


@pytest.fixture
async def fleet(settings: Settings) -> AsyncIterator[Fleet]:
    config = await open_config(settings)
    await config.create_tenant(Tenant("acme", "Acme", "0" * 64, time.time()))
    f = Fleet(settings, config)
    yield f
    for m in f.members:
        with contextlib.suppress(Exception):
            await m.stop()
    await config.aclose()


def expire_session(hosts: str, victim: KazooClient) -> None:
    """Expire ``victim``'s session: join it from a second client, then close that one."""
    thief = KazooClient(hosts=hosts, client_id=victim.client_id)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


class Proxy:
    """A TCP proxy on loopback to ``target`` that a test can cut or stall."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._conns: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._conns |= {writer, up_w}
        await asyncio.gather(
            self._pipe(reader, up_w), self._pipe(up_r, writer), return_exceptions=True
        )
        for w in (writer, up_w):
            self._conns.discard(w)
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
        writer.close()

    def drop(self) -> None:
        """Cut every connection now (the client reconnects through us)."""
        for w in list(self._conns):
            w.transport.abort()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.drop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def proxy(zk_server: Any) -> AsyncIterator[Proxy]:
    host, port = zk_server.address.rsplit(":", 1)
    p = Proxy(host, int(port))
    await p.start()
    yield p
    p.resume()
    await p.close()
