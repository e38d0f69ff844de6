"""``FleetAssignment``: one worker's membership of the fleet, and the groups it owns.

Use case: ``emq worker`` without ``--standalone``. The worker registers an ephemeral node
``/running/<id>`` (host, pid, capacity weight), contends for leadership (the leader computes and
writes ``/assignments``, see :mod:`allocator.leader`), follows ``/assignments`` with a data watch
and hands the worker :class:`~emq.core.interfaces.OwnedGroups` snapshots: the groups the document
gives it, each once its handover has settled (:mod:`allocator.handover`).

``FleetAssignment`` is a thin coordinator of four parts with one job each, which it wires
together and runs as one task group:

* :class:`~allocator.membership.Membership` — the session, the running node, heartbeats, the
  lease and the store's word (the states below);
* :class:`~allocator.ownership.Ownership` — the document and the topics, offered as snapshots;
* :class:`~allocator.releases.Releases` — release markers owed, handovers awaited;
* :class:`~allocator.campaign.Campaign` — leader election and the leader's term.

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
:meth:`vouched` with *the check's send time* + 0.6 s (most checks only ask whether any claim
took a group from the worker since its last full check: see :mod:`worker.holds`).
:meth:`may_dispatch` is True while either ZooKeeper's lease or the store's word is current;
:meth:`may_fetch` while connected or vouched. A worker paused (SIGSTOP, a long GC) resumes with
both run out and pushes nothing until a fresh check, sent after it resumed, has dropped what
others claimed meanwhile.

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

**Release markers** (``/released/<group>@<epoch>``): see :mod:`allocator.releases`.

kazoo calls back on its own threads; the listener and the watches here only hand events to the
loop (``call_soon_threadsafe``). Every decision is made on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]

from adapters import zk
from allocator.campaign import Campaign
from allocator.document import Document
from allocator.handover import HandoverGate
from allocator.leader import Leader
from allocator.membership import Membership, MembershipHooks
from allocator.ownership import Ownership, parse_group
from allocator.releases import Releases
from allocator.settings import FleetSettings, grace_s, self_fence_s
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import AssignmentSource, ConfigStore, OwnedGroups
from emq.core.model import GroupRef, Namespace
from emq.core.naming import ZkPaths

__all__ = ["FleetAssignment", "join", "parse_group"]

log = logging.getLogger(__name__)


class FleetAssignment(AssignmentSource):
    """The worker's :class:`~emq.core.interfaces.AssignmentSource` in a fleet (see the module)."""

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
        self.grace_s = grace_s(settings, session_timeout_s)
        timeout_s = settings.request_timeout_s
        gate = HandoverGate(
            client,
            paths,
            namespace,
            worker_id,
            grace_s=self.grace_s,
            request_timeout_s=timeout_s,
            touching=lambda: self.ownership.touching,
        )
        self.ownership = Ownership(
            worker_id,
            gate,
            fenced=lambda: self.membership.fenced,
            on_document=lambda doc: self.releases.on_document(doc),
            on_applied=lambda: self.releases.wake.set(),
        )
        self.releases = Releases(
            client, paths, namespace, worker_id, gate, self.ownership, request_timeout_s=timeout_s
        )
        own = self.ownership
        hooks = MembershipHooks(
            connected=self.releases.wake.set,
            fenced=own.fence,
            live=own.publish,
            assignment=own.take_document,
        )
        self.membership = Membership(
            client,
            paths,
            namespace,
            worker_id,
            settings,
            lease_s=self_fence_s(session_timeout_s),
            hooks=hooks,
        )
        self.campaign = Campaign(
            client,
            paths,
            namespace,
            worker_id,
            settings,
            grace_s=self.grace_s,
            membership=self.membership,
            ownership=own,
        )
        self._run_task: asyncio.Task[Any] | None = None
        self._closed = False

    # ----------------------------------------------------------------- the worker's side

    def current(self) -> OwnedGroups:
        return self.ownership.current

    def updates(self) -> AsyncIterator[OwnedGroups]:
        return self.ownership.updates()

    async def release(self, group: GroupRef, epoch: int) -> None:
        """Record that the worker let go; the marker is written by the handover task."""
        key = (str(group), epoch)
        self.ownership.let_go(key)
        self.releases.defer(key)

    def inbox(self) -> str | None:
        return self.id

    def advertise(self, info: Mapping[str, str]) -> None:
        self.membership.advertised.update(info)

    def vouched(self, until: float) -> None:
        """The worker's store confirmed every group it holds is still its own (see Vouching)."""
        self.membership.vouched(until)

    def may_fetch(self) -> bool:
        m = self.membership
        return not m.fenced and (m.connected or time.monotonic() < m.vouched_until)

    def may_dispatch(self) -> bool:
        # Asked before every push: Ownership.caught_up() inlined, a call costs more than it does.
        m, own = self.membership, self.ownership
        return (
            not m.fenced
            and own.applied_version >= own.fence_version
            and time.monotonic() < max(m.lease_until, m.vouched_until)
        )

    # ----------------------------------------------------------------- what operators and tests see

    @property
    def document(self) -> Document:
        """The assignment document this member acts on."""
        return self.ownership.document

    @property
    def is_leader(self) -> bool:
        return self.campaign.is_leader

    @property
    def leader(self) -> Leader | None:
        return self.campaign.leader

    # ----------------------------------------------------------------- lifecycle

    async def start(self, timeout_s: float) -> None:
        """Connect the session (``BackendUnavailable`` if ZooKeeper cannot be reached)."""
        await zk.start(self._client, timeout_s)

    async def run(self) -> None:
        """Run membership, heartbeats, the assignment watch, handovers and the election."""
        self._run_task = asyncio.current_task()
        assignments = self._paths.assignments(self._ns)
        timeout_s = self._settings.request_timeout_s
        parts = self.membership.tasks() | {
            "follow": self.ownership.follow(self._client, assignments, timeout_s),
            "handover": self.releases.run(lambda: self.membership.connected),
            "topics": self.ownership.watch_topics(self._config, self._ns),
            "campaign": self.campaign.run(),
        }
        try:
            async with asyncio.TaskGroup() as tasks:
                for name, coro in parts.items():
                    tasks.create_task(coro, name=f"emq-fleet-{name}")
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                log.exception("fleet membership of %s failed", self.id)
                self.ownership.fail(e)
            raise

    async def aclose(self) -> None:
        """Leave: promise every group we held or were given is released, then end the session."""
        if self._closed:
            return
        self._closed = True
        self.ownership.closed = True  # the data watch drops itself at its next call
        task, self._run_task = self._run_task, None
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(BackendUnavailable):
            if self.membership.connected:
                await self.releases.write_markers(self.releases.leaving())
        self.releases.wake.closed = True
        self.membership.close()
        await zk.stop(self._client)
        log.info("worker %s left the fleet", self.id)


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
    client = new_client(  # auth and ACLs: see adapters.zk.client_factory
        hosts=hosts, timeout=session_timeout_s, connection_retry=zk.reconnecting(zk.RECONNECT_MAX_S)
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
