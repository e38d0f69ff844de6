"""The elected leader's work: recompute the assignment when members or groups change, write it.

States and transitions (one :class:`Leader` per term; a new election makes a new one)::

    STARTING --read /assignments--> WAITING --members/topics changed, or a timer--> COMPUTING
                                       ^                                              |
                                       +--- unchanged / written / stale: re-read -----+
    any --guard fails (our election node is gone)--> DEPOSED (raises :class:`Deposed`)

**Inputs.** Members: the children of ``/running`` (a children watch) and their weights (node
data). Groups: every group of every topic of the namespace, from the config store's watch.
Release markers: the children of ``/released``, read before each computation.

**Computation.** :func:`allocator.assign.assign` with the previous owners (sticky, bounded
loads), run in a thread (about 0.4 s for 20 000 groups and 1 000 members); then
:func:`allocator.document.advance` gives moved groups the new generation as epoch and the list
of former owners they must wait for.

**Guarded write.** One transaction: ``check(<our election node>, version 0)`` and
``set_data(/assignments, document, version=<the version we read>)``. If our node is gone (our
session expired, maybe while we were paused) the check fails and nothing is written: we are
deposed. If someone else wrote since we read (a former leader's write that landed just before
its node went, read by us from a lagging server), the version fails: we re-read and recompute.

**Clean-up.** After a write, release markers that no entry refers to any more are deleted, and
former owners that left a marker, or whose node is gone for the grace period, are dropped from
the waiting lists at the next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import BadVersionError, NoNodeError  # type: ignore[import-untyped]

from adapters import zk
from allocator.assign import assign
from allocator.document import Document, advance, next_generation, same_groups
from allocator.settings import FleetSettings
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

NODE_LIMIT_BYTES = 0xFFFFF  # ZooKeeper's default jute.maxbuffer: ~80 000 groups compressed
SAFETY_RECOMPUTE_S = 30.0  # recompute now and then even without a watch firing
_UNESCAPES = (("%2F", "/"), ("%40", "@"), ("%25", "%"))


class Deposed(Exception):
    """Our election node is gone: another leader may be writing. Stop leading."""


def parse_marker(name: str) -> tuple[str, int] | None:
    """``(group, epoch)`` of a release marker's node name (see ``ZkPaths.release_marker``)."""
    escaped, at, epoch = name.rpartition("@")
    if not at or not epoch.isdigit():
        return None
    for old, new in _UNESCAPES:
        escaped = escaped.replace(old, new)
    return escaped, int(epoch)


def member_weight(raw: bytes | None) -> int:
    """A member's capacity weight from its running node (1 if unreadable)."""
    try:
        weight = json.loads(raw or b"{}").get("weight", 1)
    except (ValueError, AttributeError):
        return 1
    return weight if isinstance(weight, int) and not isinstance(weight, bool) and weight > 0 else 1


class Leader:
    """One leadership term: compute and write assignments until deposed or cancelled."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        me: str,
        node: str,
        settings: FleetSettings,
        *,
        groups: Callable[[], Sequence[str] | None],
        topics_changed: zk.Poke,
        grace_s: float,
    ) -> None:
        self._client = client
        self._ns = namespace
        self._me = me
        self._node = node  # our election node: the guard of every write
        self._settings = settings
        self._groups = groups
        self._topics_changed = topics_changed
        self._grace_s = grace_s
        self._running = paths.running(namespace)
        self._assignments = paths.assignments(namespace)
        self._released = paths.released(namespace)
        self._paths = paths
        self._absent_since: dict[str, float] = {}
        self.writes = 0

    async def run(self) -> None:
        """Lead: raises :class:`Deposed` when the guard fails; runs until cancelled otherwise."""
        for path in (self._running, self._released, self._assignments):
            await self._one(self._client.ensure_path_async(path), f"creating {path}")
        doc, version = await self._read()
        members_changed = zk.Poke()
        try:
            while True:
                groups = self._groups()
                members = await self._members(members_changed)
                if groups is not None and members:
                    try:
                        doc, version = await self._step(doc, version, groups, members)
                    except BadVersionError:
                        log.info("assignment changed under leader %s; re-reading", self._me)
                        doc, version = await self._read()
                        continue  # and recompute from what is there now
                await self._wait(doc, members, members_changed)
        finally:
            members_changed.closed = True

    async def _step(
        self, doc: Document, version: int, groups: Sequence[str], members: Mapping[str, int]
    ) -> tuple[Document, int]:
        markers = await self._markers()
        s = self._settings
        target = await asyncio.to_thread(
            assign,
            groups,
            members,
            vnodes=s.vnodes,
            previous=doc.owners(),
            balance=s.balance,
            keep_balance=s.keep_balance,
        )
        now = time.time()

        def settled(group: str, worker: str, epoch: int) -> bool:
            return (group, epoch) in markers or self._gone_long(worker, now=time.monotonic())

        new = advance(
            doc,
            target,
            generation=next_generation(doc.generation, int(now * 1000)),
            leader=self._me,
            now=now,
            settled=settled,
        )
        if same_groups(doc, new):
            return doc, version
        version = await self._write(new, version)
        moved = sum(
            1
            for g, e in new.groups.items()
            if g not in doc.groups or e.epoch != doc.groups[g].epoch
        )
        log.info(
            "leader %s wrote generation %d: %d groups over %d members, %d (re)assigned",
            self._me,
            new.generation,
            len(new.groups),
            len(members),
            moved,
        )
        await self._collect(new, markers)
        return new, version

    async def _wait(
        self, doc: Document, members: Mapping[str, int], members_changed: zk.Poke
    ) -> None:
        """Until members or topics change (or a waiting former owner's grace ends), coalesced."""
        timeout = SAFETY_RECOMPUTE_S
        now = time.monotonic()
        for worker in {w for e in doc.groups.values() for w, _ in e.waits_for} - set(members):
            since = self._absent_since.setdefault(worker, now)
            if since + self._grace_s > now:
                timeout = min(timeout, since + self._grace_s - now + 0.01)
        waits = [
            asyncio.ensure_future(members_changed.wait()),
            asyncio.ensure_future(self._topics_changed.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        await asyncio.sleep(self._settings.coalesce_s)

    def _gone_long(self, worker: str, *, now: float) -> bool:
        since = self._absent_since.get(worker)
        return since is not None and now - since >= self._grace_s

    # ----------------------------------------------------------------- ZooKeeper

    async def _read(self) -> tuple[Document, int]:
        data, stat = await self._one(self._client.get_async(self._assignments), "reading")
        raw = bytes(data or b"")
        doc = (
            await asyncio.to_thread(Document.decode, raw)
            if len(raw) > 65536
            else Document.decode(raw)
        )
        return doc, int(stat.version)

    async def _write(self, doc: Document, version: int) -> int:
        data = await asyncio.to_thread(doc.encode)
        if len(data) > NODE_LIMIT_BYTES * 0.9:
            log.warning(
                "assignment document is %d bytes, near ZooKeeper's default node limit (%d): raise "
                "jute.maxbuffer on servers and clients before the fleet grows further",
                len(data),
                NODE_LIMIT_BYTES,
            )
        tx = self._client.transaction()
        tx.check(self._node, 0)  # our election node, never modified: version 0 while it exists
        tx.set_data(self._assignments, data, version)
        results = await self._one(tx.commit_async(), "writing the assignment")
        failed = zk.failed_op(results)
        if failed is None:
            self.writes += 1
            return int(results[1].version)
        index, error = failed
        if index == 0:
            raise Deposed(f"election node {self._node} is gone: {type(error).__name__}")
        if isinstance(error, BadVersionError):
            raise error
        raise zk.unavailable(error, "writing the assignment")

    async def _members(self, changed: zk.Poke) -> dict[str, int]:
        """Registered workers and their weights (re-arms the children watch)."""
        names = await self._one(
            self._client.get_children_async(self._running, watch=changed), "listing members"
        )
        reads = [self._client.get_async(f"{self._running}/{n}") for n in names]
        outcomes = await zk.settle(reads, "reading members", self._settings.request_timeout_s)
        members: dict[str, int] = {}
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, NoNodeError):
                continue  # left since we listed it
            data, _stat = zk.check(outcome, "reading members")
            members[str(name)] = member_weight(data)
        for name in members:
            self._absent_since.pop(name, None)  # back (or never gone): absence starts anew
        return members

    async def _markers(self) -> set[tuple[str, int]]:
        names = await self._one(self._client.get_children_async(self._released), "listing markers")
        return {m for n in names if (m := parse_marker(str(n))) is not None}

    async def _collect(self, doc: Document, markers: set[tuple[str, int]]) -> None:
        """Delete the release markers no entry of ``doc`` refers to any more."""
        needed = doc.referenced()
        stale = [m for m in markers if m not in needed]
        if not stale:
            return
        deletes = [
            self._client.delete_async(self._paths.release_marker(self._ns, g, e)) for g, e in stale
        ]
        with contextlib.suppress(BackendUnavailable):  # the next write collects them again
            await zk.settle(deletes, "deleting release markers", self._settings.request_timeout_s)

    async def _one(self, pending: Any, what: str) -> Any:
        return await zk.one(pending, what, self._settings.request_timeout_s)
