"""``FleetAssignment``: one worker's membership of the fleet, and the groups it owns.

Use case: ``emq worker`` without ``--standalone``. The worker registers an ephemeral node
``/running/<id>`` (host, pid, capacity weight), contends for leadership (the leader computes and
writes ``/assignments``, see :mod:`allocator.leader`), follows ``/assignments`` with a data watch
and hands the worker :class:`~emq.core.interfaces.OwnedGroups` snapshots: the groups the document
gives it, each once its handover has settled (:mod:`allocator.handover`).

States of a member (the ZooKeeper session's state, and the store's word, drive them)::

    REGISTERING --node created--> MEMBER --SUSPENDED--> CUT OFF (fetching and dispatching go on
        ^                           ^                      while the store vouches: see Vouching)
        |                           |  CONNECTED, same       |
        |                           +--session---------------+
        |                                                    | neither vouches: no answer from
        |                                                    v ZooKeeper for 2/3 of the session
        |  CONNECTED (new session)                        FENCED   timeout, no store check for 0.6 s
        +-------------------------- LOST (expired) ------> (empty snapshot: the worker drops
                                                            every group; nothing dispatched)
    FENCED --heartbeat answered on a live, registered session--> MEMBER (the assignment again)
    any --aclose()--> LEFT (release markers written, session closed: the node goes with it)

**ZooKeeper's lease.** A heartbeat (an ``exists`` on our own node, every 1/4 of the lease)
renews it to *its send time* + 2/3 of the session timeout. The server expires a session no
earlier than a full session timeout after it last heard from us, so the lease has ended a third
of a session timeout before our node can vanish.

**Vouching (the store's word).** A ZooKeeper outage must not stop delivery: while it lasts no
group can move (moving one takes a new document), and the store fences every write anyway. So
the worker also asks the store, every 0.25 s and in one round trip, whether it still *holds*
each of its groups (a claim records the claiming process as the group's holder; a clean release
removes it), drops at once any group claimed since by another, and reports
:meth:`vouched` with *the check's send time* + 1 s. :meth:`may_dispatch` is True while either
ZooKeeper's lease or the store's word is current; :meth:`may_fetch` while connected or vouched.
A worker paused (SIGSTOP, a long GC) resumes with both run out and pushes nothing until a fresh
check, sent after it resumed, has dropped what others claimed meanwhile.

Why two owners never push one group at once. A new owner claims a group only once each former
owner left a release marker (it had stopped and removed itself as holder) or had its running
node gone (its session expired, so its ZooKeeper lease had ended, see above). In the second case
the claim finds the former holder still recorded (a *contested* claim) and the new owner waits
1.0 s before pushing: the former owner may push only on the store's word, which lasts 0.6 s from
the send time of a check, and every check sent after the claim finds the group taken. Each lease
is measured on the process's own monotonic clock from a send time, so a slow answer only
shortens it. A worker that can reach neither ZooKeeper nor the store self-fences.

**Self-fence.** Cut off from both: an empty snapshot, so the worker drops its groups (it stops,
lets in-flight pushes end, checkpoints with its old epoch, which Redis refuses if a new owner
already claimed a newer one) and dispatches nothing until it has applied that snapshot.

**Release markers.** ``/released/<group>@<epoch>`` promises "this worker will never touch this
group at this epoch again". It is written when the worker has released a group that the document
no longer gives it at that epoch, when a document lists this worker as a former owner it does
not touch (after a restart, say), and for everything at :meth:`aclose`. Never for a group the
document still gives it at that epoch: the worker may take it again after a self-fence.

kazoo calls back on its own threads; the listener and the watches here only hand events to the
loop (``call_soon_threadsafe``). Every decision is made on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException, NodeExistsError  # type: ignore[import-untyped]
from kazoo.recipe.watchers import DataWatch  # type: ignore[import-untyped]

from allocator import zk
from allocator.document import Document, Entry
from allocator.election import Election
from allocator.handover import HandoverGate
from allocator.leader import Deposed, Leader
from allocator.settings import FleetSettings, grace_s, self_fence_s
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import AssignmentSource, ConfigStore, OwnedGroups
from emq.core.model import GroupRef, Namespace, Topic, TopicRef
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

TOPIC_SETTLE_S = 0.2  # let the worker's own topic watch take a new topic before we hand it over
RETRY_S = 0.5
RECONNECT_MAX_S = 1.0
Key = tuple[str, int]  # (str(GroupRef), epoch)


def parse_group(name: str) -> GroupRef | None:
    """The :class:`GroupRef` of ``str(GroupRef)`` (``ns/tenant/topic/g<i>``), or None."""
    parts = name.split("/")
    if len(parts) != 4 or not parts[3].startswith("g") or not parts[3][1:].isdigit():
        return None
    try:
        ns = Namespace(parts[0])
    except ValueError:
        return None
    return GroupRef(TopicRef(ns, parts[1], parts[2]), int(parts[3][1:]))


def _keys(owned: OwnedGroups) -> frozenset[Key]:
    return frozenset((str(g), e) for g, e in owned.groups.items())


class FleetAssignment(AssignmentSource):
    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        worker_id: str,
        config: ConfigStore,
        settings: FleetSettings,
        *,
        session_timeout_s: float,
    ) -> None:
        self.id = worker_id
        self._client = client
        self._paths = paths
        self._ns = namespace
        self._config = config
        self._settings = settings
        self._node = paths.worker(namespace, worker_id)
        self._lease_s = self_fence_s(session_timeout_s)
        self.grace_s = grace_s(settings, session_timeout_s)
        self._loop = asyncio.get_running_loop()
        self._states: asyncio.Queue[str] = asyncio.Queue()
        self._connected = False
        self._registered = asyncio.Event()
        self._lost = asyncio.Event()  # set (and replaced) each time a session is lost
        self._lease_until = 0.0
        self._vouched_until = 0.0  # monotonic: the worker's store vouches for its groups until
        self._fenced = True  # until the first heartbeat of a registered session
        self._fence_version = 0
        self._applied_version = 0
        self.document = Document()
        self._mine: dict[str, Entry] = {}
        self._waiting_on_me: set[Key] = set()
        self._topics: Mapping[TopicRef, Topic] | None = None
        self._group_names: list[str] | None = None
        self._current = OwnedGroups(0)
        self._version = 0
        self._bump = asyncio.Event()
        self._applied = OwnedGroups(0)
        self._touching: frozenset[Key] = frozenset()
        self._deferred: set[Key] = set()  # released while the document still names us
        self._marked: set[Key] = set()
        self._wake_register = zk.Poke()
        self._wake_heartbeat = zk.Poke()
        self._wake_handover = zk.Poke()
        self._topics_changed = zk.Poke()
        self._gate = HandoverGate(
            client,
            paths,
            namespace,
            worker_id,
            grace_s=self.grace_s,
            request_timeout_s=settings.request_timeout_s,
            touching=lambda: self._touching,
        )
        self._decoding: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._closed = False
        self._advertised: dict[str, str] = {}
        self.is_leader = False
        self.leader: Leader | None = None
        client.add_listener(self._listener)

    # ----------------------------------------------------------------- the worker's side

    def current(self) -> OwnedGroups:
        return self._current

    async def updates(self) -> AsyncIterator[OwnedGroups]:
        seen = -1
        while True:
            while self._version == seen:
                self._bump.clear()
                await self._bump.wait()
                if self._failure is not None:
                    raise self._failure
            snapshot, seen = self._current, self._version
            self._touching = _keys(self._applied) | _keys(snapshot)
            yield snapshot
            # Asked for the next one: the worker has applied this one (released what it lost).
            self._applied, self._applied_version = snapshot, seen
            self._touching = _keys(snapshot)
            self._wake_handover.set()

    async def release(self, group: GroupRef, epoch: int) -> None:
        """Record that the worker let go; the marker is written by the handover task."""
        key = (str(group), epoch)
        self._touching = self._touching - {key}
        self._deferred.add(key)
        self._wake_handover.set()

    def advertise(self, info: Mapping[str, str]) -> None:
        self._advertised.update(info)

    def vouched(self, until: float) -> None:
        """The worker's store confirmed every group it holds is still its own (see Vouching)."""
        self._vouched_until = max(self._vouched_until, until)

    def may_fetch(self) -> bool:
        return not self._fenced and (self._connected or time.monotonic() < self._vouched_until)

    def may_dispatch(self) -> bool:
        return (
            not self._fenced
            and self._applied_version >= self._fence_version
            and time.monotonic() < max(self._lease_until, self._vouched_until)
        )

    # ----------------------------------------------------------------- lifecycle

    async def start(self, timeout_s: float) -> None:
        """Connect the session (in a thread: kazoo's start blocks)."""
        try:
            await asyncio.to_thread(self._client.start, timeout_s)
        except Exception as e:
            raise zk.unavailable(e, "connecting") from e

    async def run(self) -> None:
        """Run membership, heartbeats, the assignment watch, handovers and the election."""
        self._run_task = asyncio.current_task()
        try:
            async with asyncio.TaskGroup() as tasks:
                for name, coro in (
                    ("session", self._session()),
                    ("register", self._membership()),
                    ("heartbeat", self._heartbeat()),
                    ("follow", self._follow()),
                    ("handover", self._handovers()),
                    ("topics", self._watch_topics()),
                    ("campaign", self._campaign()),
                ):
                    tasks.create_task(coro, name=f"emq-fleet-{name}")
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                log.exception("fleet membership of %s failed", self.id)
                self._failure = e
                self._bump.set()
            raise

    async def aclose(self) -> None:
        """Leave: promise every group we held or were given is released, then end the session."""
        if self._closed:
            return
        self._closed = True
        task, self._run_task = self._run_task, None
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        leaving = set(self._deferred) | {(g, e.epoch) for g, e in self._mine.items()}
        leaving |= self._waiting_on_me
        with contextlib.suppress(BackendUnavailable):
            if self._connected:
                await self._write_markers(sorted(leaving - self._marked))
        for poke in (self._wake_register, self._wake_heartbeat, self._wake_handover):
            poke.closed = True
        self._client.remove_listener(self._listener)
        await asyncio.to_thread(self._stop_client)
        log.info("worker %s left the fleet", self.id)

    def _stop_client(self) -> None:
        self._client.stop()
        self._client.close()

    # ----------------------------------------------------------------- session

    def _listener(self, state: str) -> None:
        """kazoo's session listener, on a kazoo thread: never blocks, only hands over."""
        zk.call_soon(self._loop, self._states.put_nowait, state)

    async def _session(self) -> None:
        while True:
            timeout = None
            if not self._connected and not self._fenced:
                timeout = max(0.0, self._vouched() - time.monotonic())
            try:
                async with asyncio.timeout(timeout):
                    state = await self._states.get()
            except TimeoutError:
                if time.monotonic() >= self._vouched():  # the store stopped vouching too
                    self._fence("neither ZooKeeper nor the store vouches for our groups")
                continue
            self._on_state(state)

    def _vouched(self) -> float:
        """Until when (monotonic) ZooKeeper's lease or the store's check vouches for us."""
        return max(self._lease_until, self._vouched_until)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected = True
            log.info("worker %s: ZooKeeper session connected", self.id)
            self._wake_register.set()
            self._wake_heartbeat.set()
            self._wake_handover.set()
        elif state == KazooState.SUSPENDED:
            self._connected = False
            log.warning(
                "worker %s: ZooKeeper connection lost; going on while the store vouches", self.id
            )
        else:  # LOST: the session expired; kazoo goes on to connect a new one
            self._connected = False
            self._registered.clear()
            self._lost.set()
            self._lost = asyncio.Event()
            self._fence("ZooKeeper session expired")

    def _fence(self, reason: str) -> None:
        if self._fenced:
            return
        self._fenced = True
        log.warning("worker %s self-fences (%s): dropping every group", self.id, reason)
        self._publish()
        self._fence_version = self._version

    async def _membership(self) -> None:
        while True:
            await self._wake_register.wait()
            if not self._connected or self._registered.is_set():
                continue
            try:
                await self._register()
            except (BackendUnavailable, KazooException) as e:
                log.warning("worker %s cannot register yet: %s", self.id, e)
                await asyncio.sleep(RETRY_S)
                self._wake_register.set()

    async def _register(self) -> None:
        await self._one(self._client.ensure_path_async(self._paths.running(self._ns)), "setup")
        await self._one(self._client.ensure_path_async(self._paths.released(self._ns)), "setup")
        info = {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "weight": self._settings.weight,
            "started_at": round(time.time(), 3),
        } | self._advertised
        data = json.dumps(info).encode()
        while True:
            try:
                await self._one(self._client.create_async(self._node, data, ephemeral=True), "reg")
                break
            except NodeExistsError:
                gone = zk.Poke()
                stat = await self._one(self._client.exists_async(self._node, watch=gone), "reg")
                if stat is not None and stat.ephemeralOwner == self._session_id():
                    break  # ours: the create landed before a connection loss
                if stat is not None:
                    log.warning("worker id %s is still held by another session; waiting", self.id)
                    await gone.wait(self._lease_s)
                gone.closed = True
        # Read the assignment as it is now before anything is offered to the worker: after a
        # lost session, the cached one may name groups the leader has moved since.
        await self._one(self._client.ensure_path_async(self._paths.assignments(self._ns)), "setup")
        data, _stat = await self._one(
            self._client.get_async(self._paths.assignments(self._ns)), "reading the assignment"
        )
        await self._take_document(bytes(data or b""))
        self._registered.set()
        log.info("worker %s registered at %s", self.id, self._node)
        self._wake_heartbeat.set()

    def _session_id(self) -> int | None:
        cid = self._client.client_id
        return int(cid[0]) if cid else None

    async def _heartbeat(self) -> None:
        while True:
            await self._wake_heartbeat.wait(self._lease_s / 4)
            if not (self._connected and self._registered.is_set()):
                continue
            sent = time.monotonic()
            try:
                stat = await zk.one(
                    self._client.exists_async(self._node), "heartbeat", self._lease_s
                )
            except BackendUnavailable:
                continue
            if stat is None or stat.ephemeralOwner != self._session_id():
                self._registered.clear()  # deleted under us: register again
                self._wake_register.set()
                continue
            self._lease_until = max(self._lease_until, sent + self._lease_s)
            if self._fenced:
                self._fenced = False
                log.info("worker %s: session live; following the assignment again", self.id)
                self._publish()

    # ----------------------------------------------------------------- the assignment

    async def _follow(self) -> None:
        path = self._paths.assignments(self._ns)
        while True:
            try:
                await self._one(self._client.ensure_path_async(path), "setup")
                # DataWatch reads the node (and calls back once) in its constructor: off the loop.
                await asyncio.to_thread(DataWatch, self._client, path, self._on_data)
                return  # kazoo keeps it armed, across reconnections and new sessions too
            except Exception as e:
                log.debug("cannot watch %s yet: %s", path, e)
                await asyncio.sleep(RETRY_S)

    def _on_data(self, data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        """The data watch's callback, on a kazoo thread: hands the bytes to the loop."""
        if self._closed or data is None:
            return False if self._closed else None
        raw = bytes(data)
        if not zk.call_soon(self._loop, self._spawn_take, raw):
            return False
        return None

    def _spawn_take(self, raw: bytes) -> None:
        task = self._loop.create_task(self._take_document(raw))
        self._decoding.add(task)  # referenced until done: the loop keeps only weak references
        task.add_done_callback(self._decoding.discard)

    async def _take_document(self, raw: bytes) -> None:
        decode = Document.decode
        try:  # a large document is decoded off the loop (20 000 groups: some 50 ms)
            doc = await asyncio.to_thread(decode, raw) if len(raw) > 65536 else decode(raw)
        except ValueError as e:
            log.error("worker %s: %s", self.id, e)
            return
        if doc.generation <= self.document.generation and self.document.generation:
            return  # an older (or the same) document arriving late
        self.document = doc
        self._marked &= doc.referenced()  # a marker nobody waits for need not be remembered
        self._mine = doc.of(self.id)
        self._waiting_on_me = {
            (g, ep) for g, e in doc.groups.items() for w, ep in e.waits_for if w == self.id
        }
        self._gate.forget(self._mine)
        self._publish()
        self._wake_handover.set()

    def _publish(self) -> None:
        """Offer the worker the groups it may own now (nothing while fenced)."""
        groups: dict[GroupRef, int] = {}
        if not self._fenced and self._topics is not None:
            now = time.monotonic()
            for name, entry in self._mine.items():
                ref = parse_group(name)
                if (
                    ref is not None
                    and ref.topic in self._topics
                    and self._gate.ready(name, entry, now)
                ):
                    groups[ref] = entry.epoch
        snapshot = OwnedGroups(self.document.generation, groups)
        if snapshot != self._current:
            self._current = snapshot
            self._version += 1
            self._bump.set()

    # ----------------------------------------------------------------- handovers

    async def _handovers(self) -> None:
        """Write due release markers; watch what pending handovers wait for; publish."""
        timeout: float | None = None
        while True:
            await self._wake_handover.wait(timeout)
            timeout = None
            if not self._connected:
                continue  # woken again on reconnection
            try:
                await self._write_markers(self._due_markers())
                pending = self._gate.pending(self._mine)
                if pending:
                    await self._gate.observe(pending, self._wake_handover)
                    self._publish()
                    pending = self._gate.pending(self._mine)
            except BackendUnavailable as e:
                log.debug("worker %s: handover check failed: %s", self.id, e)
                timeout = RETRY_S
                continue
            self._publish()
            deadline = self._gate.next_deadline(pending)
            if deadline is not None:
                timeout = max(0.0, deadline - time.monotonic()) + 0.01
            elif pending:
                timeout = 1.0  # a safety re-check; watches normally wake us first

    def _due_markers(self) -> list[Key]:
        """(group, epoch) we do not touch, that the document no longer gives us, unmarked."""
        due = []
        for key in (self._deferred | self._waiting_on_me) - self._marked:
            group, epoch = key
            entry = self.document.groups.get(group)
            still_ours = entry is not None and entry.owner == self.id and entry.epoch == epoch
            if key not in self._touching and not still_ours:
                due.append(key)
        return sorted(due)

    async def _write_markers(self, keys: list[Key]) -> None:
        if not keys:
            return
        creates = [
            self._client.create_async(self._paths.release_marker(self._ns, g, e), b"")
            for g, e in keys
        ]
        outcomes = await zk.settle(
            creates, "writing release markers", self._settings.request_timeout_s
        )
        failed = None
        for key, outcome in zip(keys, outcomes, strict=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, NodeExistsError):
                failed = outcome
                continue
            self._marked.add(key)
            self._deferred.discard(key)
        if failed is not None:  # a missing parent included: registration creates it again
            raise zk.unavailable(failed, "writing release markers")
        log.info("worker %s left release markers for %d group(s)", self.id, len(keys))

    # ----------------------------------------------------------------- topics and leadership

    async def _watch_topics(self) -> None:
        async for topics in self._config.watch_topics(self._ns):
            grew = self._topics is not None and not set(topics) <= set(self._topics)
            names = sorted(str(g) for t in topics.values() for g in t.group_refs())
            self._topics = topics
            if names != self._group_names:
                self._group_names = names
                self._topics_changed.set()
            if grew:
                await asyncio.sleep(TOPIC_SETTLE_S)
            self._publish()

    async def _campaign(self) -> None:
        failures = 0
        while True:
            await self._registered.wait()
            lost = self._lost
            election = Election(
                self._client,
                self._paths.leader(self._ns),
                self.id,
                request_timeout_s=self._settings.request_timeout_s,
            )
            term = asyncio.ensure_future(self._term(election))
            ended = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({term, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (term, ended):
                    t.cancel()
                await asyncio.gather(term, ended, return_exceptions=True)
                self.is_leader, self.leader = False, None
                with contextlib.suppress(KazooException):
                    await election.resign()
            failures = failures + 1 if term.done() and not term.cancelled() else 0
            if failures:
                log.warning("worker %s: leadership ended: %s", self.id, term.exception())
            await asyncio.sleep(min(5.0, RETRY_S * 2 ** min(failures, 4)))

    async def _term(self, election: Election) -> None:
        node = await election.campaign()
        self.leader = Leader(
            self._client,
            self._paths,
            self._ns,
            self.id,
            node,
            self._settings,
            groups=lambda: self._group_names,
            topics_changed=self._topics_changed,
            grace_s=self.grace_s,
        )
        self.is_leader = True
        try:
            await self.leader.run()
        except Deposed:
            log.warning("worker %s was deposed as leader", self.id)
            raise

    async def _one(self, pending: Any, what: str) -> Any:
        return await zk.one(pending, what, self._settings.request_timeout_s)


async def join(
    hosts: str,
    *,
    root: str,
    namespace: Namespace,
    worker_id: str,
    config: ConfigStore,
    settings: FleetSettings,
    session_timeout_s: float,
    new_client: Callable[..., KazooClient] = KazooClient,
) -> FleetAssignment:
    """A member on a new ZooKeeper session of its own (``BackendUnavailable`` if unreachable).

    Call :meth:`FleetAssignment.run` to take part, :meth:`FleetAssignment.aclose` to leave.
    """
    # Reconnect at least every RECONNECT_MAX_S (kazoo's default backs off to 60 s): a session
    # survives a server restart only if we are back within its timeout of the server's return.
    retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": RECONNECT_MAX_S}
    client = new_client(  # auth and ACLs: see emq.compose
        hosts=hosts, timeout=session_timeout_s, connection_retry=retry
    )
    fleet = FleetAssignment(
        client,
        ZkPaths(root),
        namespace,
        worker_id,
        config,
        settings,
        session_timeout_s=session_timeout_s,
    )
    try:
        await fleet.start(timeout_s=max(session_timeout_s, 5.0))
    except BaseException:
        await fleet.aclose()
        raise
    return fleet
