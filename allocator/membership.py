"""One worker's membership of the fleet: its session, its running node, its lease.

Use case: keep ``/running/<id>`` registered on a live session and say, at any moment, whether
ZooKeeper (the lease) or the store (vouching) still vouches for this worker's ownership. States
(the ZooKeeper session's state, and the store's word, drive them)::

    REGISTERING --node created--> MEMBER --SUSPENDED--> CUT OFF (fetching and dispatching go on
        ^                           ^                      while the store vouches)
        |                           |  CONNECTED, same       |
        |                           +--session---------------+
        |                                                    | neither vouches
        |  CONNECTED (new session)                           v
        +-------------------------- LOST (expired) ------> FENCED
    FENCED --heartbeat answered on a live, registered session--> MEMBER

**The lease.** A heartbeat (an ``exists`` on our own node, every 1/4 of the lease) renews it to
*its send time* + the lease (2/3 of the session timeout): the server expires a session no
earlier than a full session timeout after it last heard from us, so the lease has ended a third
of a session timeout before our node can vanish. **Vouching**: the worker's store confirms
that it still holds its groups (:meth:`Membership.vouched`); see :mod:`allocator.fleet`.

kazoo's session listener only queues the state on the loop (:class:`adapters.zk.SessionStates`);
every decision is made on the event loop. The parts that act on a change are told through
:class:`MembershipHooks`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException, NodeExistsError  # type: ignore[import-untyped]

from adapters import zk
from allocator.settings import FleetSettings
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

RETRY_S = 0.5


@dataclass(frozen=True, slots=True)
class MembershipHooks:
    """What the other parts of a fleet member do when the membership changes."""

    connected: Callable[[], None]  # the session is (re)connected: resume ZooKeeper work
    fenced: Callable[[], None]  # nothing vouches for our groups any more: offer none
    live: Callable[[], None]  # a fenced member is live again: offer the assignment again
    assignment: Callable[[bytes], Awaitable[None]]  # the assignment as read at registration


class Membership:
    """The session, the running node, the lease and the store's word (see the module)."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        worker_id: str,
        settings: FleetSettings,
        *,
        lease_s: float,
        hooks: MembershipHooks,
    ) -> None:
        self.id = worker_id
        self._client = client
        self._paths = paths
        self._ns = namespace
        self._settings = settings
        self._node = paths.worker(namespace, worker_id)
        self.lease_s = lease_s
        self._hooks = hooks
        self._states = zk.SessionStates(client)
        self.connected = False
        self.registered = asyncio.Event()
        self.lost = asyncio.Event()  # set (and replaced) each time a session is lost
        self.lease_until = 0.0
        self.vouched_until = 0.0  # monotonic: the worker's store vouches for its groups until
        self.fenced = True  # until the first heartbeat of a registered session
        self.advertised: dict[str, str] = {}
        self._wake_register = zk.Poke()
        self._wake_heartbeat = zk.Poke()

    def vouched(self, until: float) -> None:
        """The worker's store confirmed every group it holds is still its own."""
        self.vouched_until = max(self.vouched_until, until)

    def until(self) -> float:
        """Until when (monotonic) ZooKeeper's lease or the store's check vouches for us."""
        return max(self.lease_until, self.vouched_until)

    def tasks(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {
            "session": self._session(),
            "register": self._membership(),
            "heartbeat": self._heartbeat(),
        }

    def close(self) -> None:
        for poke in (self._wake_register, self._wake_heartbeat):
            poke.closed = True
        self._states.close()

    # ----------------------------------------------------------------- session

    async def _session(self) -> None:
        while True:
            timeout = None
            if not self.connected and not self.fenced:
                timeout = max(0.0, self.until() - time.monotonic())
            try:
                async with asyncio.timeout(timeout):
                    state = await self._states.next()
            except TimeoutError:
                if time.monotonic() >= self.until():  # the store stopped vouching too
                    self._fence("neither ZooKeeper nor the store vouches for our groups")
                continue
            self._on_state(state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.connected = True
            log.info("worker %s: ZooKeeper session connected", self.id)
            self._wake_register.set()
            self._wake_heartbeat.set()
            self._hooks.connected()
        elif state == KazooState.SUSPENDED:
            self.connected = False
            log.warning(
                "worker %s: ZooKeeper connection lost; going on while the store vouches", self.id
            )
        else:  # LOST: the session expired; kazoo goes on to connect a new one
            self.connected = False
            self.registered.clear()
            self.lost.set()
            self.lost = asyncio.Event()
            self._fence("ZooKeeper session expired")

    def _fence(self, reason: str) -> None:
        if self.fenced:
            return
        self.fenced = True
        log.warning("worker %s self-fences (%s): dropping every group", self.id, reason)
        self._hooks.fenced()

    # ----------------------------------------------------------------- the running node

    async def _membership(self) -> None:
        while True:
            await self._wake_register.wait()
            if not self.connected or self.registered.is_set():
                continue
            try:
                await self._register()
            except (BackendUnavailable, KazooException) as e:
                log.warning("worker %s cannot register yet: %s", self.id, e)
                await asyncio.sleep(RETRY_S)
                self._wake_register.set()

    async def _register(self) -> None:
        client, paths = self._client, self._paths
        await self._one(client.ensure_path_async(paths.running(self._ns)), "setup")
        await self._one(client.ensure_path_async(paths.released(self._ns)), "setup")
        await self._create_node()
        # Read the assignment as it is now before anything is offered to the worker: after a
        # lost session, the cached one may name groups the leader has moved since.
        await self._one(client.ensure_path_async(paths.assignments(self._ns)), "setup")
        data, _stat = await self._one(
            client.get_async(paths.assignments(self._ns)), "reading the assignment"
        )
        await self._hooks.assignment(bytes(data or b""))
        self.registered.set()
        log.info("worker %s registered at %s", self.id, self._node)
        self._wake_heartbeat.set()

    async def _create_node(self) -> None:
        info = {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "weight": self._settings.weight,
            "started_at": round(time.time(), 3),
        } | self.advertised
        data = json.dumps(info).encode()
        while True:
            try:
                await self._one(self._client.create_async(self._node, data, ephemeral=True), "reg")
                return
            except NodeExistsError:
                gone = zk.Poke()
                stat = await self._one(self._client.exists_async(self._node, watch=gone), "reg")
                if stat is not None and stat.ephemeralOwner == self._session_id():
                    return  # ours: the create landed before a connection loss
                if stat is not None:
                    log.warning("worker id %s is still held by another session; waiting", self.id)
                    await gone.wait(self.lease_s)
                gone.closed = True

    def _session_id(self) -> int | None:
        cid = self._client.client_id
        return int(cid[0]) if cid else None

    async def _heartbeat(self) -> None:
        while True:
            await self._wake_heartbeat.wait(self.lease_s / 4)
            if not (self.connected and self.registered.is_set()):
                continue
            sent = time.monotonic()
            try:
                stat = await zk.one(
                    self._client.exists_async(self._node), "heartbeat", self.lease_s
                )
            except BackendUnavailable:
                continue
            if stat is None or stat.ephemeralOwner != self._session_id():
                self.registered.clear()  # deleted under us: register again
                self._wake_register.set()
                continue
            self.lease_until = max(self.lease_until, sent + self.lease_s)
            if self.fenced:
                self.fenced = False
                log.info("worker %s: session live; following the assignment again", self.id)
                self._hooks.live()

    async def _one(self, pending: Any, what: str) -> Any:
        return await zk.one(pending, what, self._settings.request_timeout_s)
