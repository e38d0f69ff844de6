"""The fleet as operators see it: members, leader and assignment, read from ZooKeeper.

``ZkFleetView`` opens its own session on first use (so an API process that is never asked about
the fleet never opens one) and reads, in one round of pipelined requests, ``/running`` and its
children's data, the contenders under ``/leader`` and the ``/assignments`` document.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]

from adapters import zk
from allocator.document import Document
from allocator.election import ordered
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import FleetMember, FleetState, FleetView
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)


def _member(
    name: str, raw: bytes | None, groups: dict[str, int], leader: str | None
) -> FleetMember:
    try:
        info: dict[str, Any] = json.loads(raw or b"{}")
    except ValueError:
        info = {}
    weight = info.get("weight", 1)
    return FleetMember(
        id=name,
        host=str(info.get("host", "")),
        pid=int(info.get("pid", 0) or 0),
        weight=weight if isinstance(weight, int) and weight > 0 else 1,
        started_at=float(info.get("started_at", 0.0) or 0.0),
        groups=groups,
        leader=name == leader,
        metrics=str(info.get("metrics", "") or ""),
    )


class ZkFleetView(FleetView):
    def __init__(
        self,
        hosts: str,
        *,
        root: str = "/emq",
        session_timeout_s: float = 10.0,
        request_timeout_s: float = 5.0,
        new_client: Callable[..., KazooClient] = zk.plain_client,
    ) -> None:
        self._hosts = hosts
        self._new_client = new_client  # auth and ACLs: see emq.compose
        self._paths = ZkPaths(root)
        self._session_timeout_s = session_timeout_s
        self._timeout_s = request_timeout_s
        self._client: KazooClient | None = None
        self._lock = asyncio.Lock()

    async def state(self, namespace: Namespace) -> FleetState:
        """The fleet of ``namespace`` now (one session, opened on first use)."""
        ns = namespace
        client = await self._connect()
        running, leader_dir = self._paths.running(ns), self._paths.leader(ns)
        listed = await zk.settle(
            [
                client.get_children_async(running),
                client.get_children_async(leader_dir),
                client.get_async(self._paths.assignments(ns)),
            ],
            "reading the fleet",
            self._timeout_s,
        )
        names, contenders = (self._children(o) for o in listed[:2])
        doc = Document() if isinstance(listed[2], NoNodeError) else self._doc(listed[2])
        reads = [client.get_async(f"{running}/{n}") for n in names]
        contenders = ordered(contenders)
        if contenders:
            reads.append(client.get_async(f"{leader_dir}/{contenders[0]}"))
        outcomes = await zk.settle(reads, "reading the fleet", self._timeout_s)
        leader = None
        if contenders and not isinstance(outcomes[-1], BaseException):
            leader = bytes(outcomes[-1][0] or b"").decode(errors="replace")  # type: ignore[index]
        by_owner: dict[str, dict[str, int]] = {}
        for g, e in doc.groups.items():
            by_owner.setdefault(e.owner, {})[g] = e.epoch
        members = []
        for name, outcome in zip(names, outcomes[: len(names)], strict=True):
            if not isinstance(outcome, BaseException):
                members.append(_member(name, outcome[0], by_owner.get(name, {}), leader))  # type: ignore[index]
        present = {m.id for m in members}
        orphans = {g: e.owner for g, e in doc.groups.items() if e.owner not in present}
        return FleetState(ns, doc.generation, leader, doc.written_at, members, orphans)

    @staticmethod
    def _children(outcome: object) -> list[str]:
        if isinstance(outcome, NoNodeError):
            return []
        return sorted(str(c) for c in zk.check(outcome, "reading the fleet"))

    @staticmethod
    def _doc(outcome: object) -> Document:
        data, _stat = zk.check(outcome, "reading the assignment")
        try:
            return Document.decode(bytes(data or b""))
        except ValueError as e:
            raise BackendUnavailable(str(e)) from e

    async def _connect(self) -> KazooClient:
        async with self._lock:
            if self._client is None:
                client = self._new_client(hosts=self._hosts, timeout=self._session_timeout_s)
                try:
                    await zk.start(client, self._timeout_s)
                except BaseException:
                    await zk.stop(client)
                    raise
                self._client = client
            return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await zk.stop(client)
