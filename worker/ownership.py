"""The worker's group ownership: which groups this process works, and their lifecycle.

A group's ownership on this worker is one state (:class:`worker.groups.Lifecycle`; its
transitions are in :mod:`worker.groups`): CLAIMING, CONTESTED_WAIT (its former holder never
released it: it may still push, so wait CONTESTED_WAIT_S), OWNED, RELEASING (re-assigned: no
more fetching, final writes), RELEASED, or DROPPED (a fenced write, or a hold check finds it
claimed by another worker: buffers forgotten, nothing written). A fenced claim is skipped.

:class:`Ownership` takes each assignment (:meth:`Ownership.apply`): it releases the groups
assigned away or to a new epoch, claims the new ones (:meth:`Ownership.claim`, at most
CLAIM_CONCURRENCY at once), and sets each group's share of its topic's quota
(:meth:`Ownership.quota`, :meth:`Ownership.requota`). A fenced write anywhere drops the group
(:meth:`Ownership.drop`). It shares the worker's ``topics`` and ``groups`` maps and its parts
(holds, fetcher, committer, outcomes, tenant quota); the push path never calls it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from capacity import kept_cap, split_quota
from emq.core.errors import BackendUnavailable, Fenced
from emq.core.interfaces import AssignmentSource, OwnedGroups
from emq.core.model import GroupRef, Topic, TopicRef
from worker.committer import Committer
from worker.fetch import Fetcher
from worker.groups import GroupState, TopicState
from worker.heap import Refreezer
from worker.holds import CONTESTED_WAIT_S, Holds
from worker.metrics import WorkerMetrics
from worker.outage import Outage
from worker.outcomes import Outcomes
from worker.settings import WorkerSettings
from worker.tenant_quota import TenantQuota

log = logging.getLogger(__name__)

# Claims in flight at once; those of one loop iteration share a round trip (worker.holds).
CLAIM_CONCURRENCY = 256

# A group in its contested wait: when it may be served, and whether it was worked before.
_Wait = tuple[GroupState, float, bool]


class Ownership:
    """Claims, releases and drops of one worker's groups (see the module docstring)."""

    def __init__(
        self,
        worker_id: str,
        settings: WorkerSettings,
        *,
        topics: dict[TopicRef, TopicState],
        groups: dict[str, GroupState],
        assignment: AssignmentSource,
        holds: Holds,
        fetcher: Fetcher,
        committer: Committer,
        outcomes: Outcomes,
        tenant_quota: TenantQuota,
        metrics: WorkerMetrics,
        outage: Outage,
        max_group_qps: int,
    ) -> None:
        self.id = worker_id
        self.settings = settings
        self.topics = topics
        self.groups = groups
        self.assignment = assignment
        self.holds = holds
        self.fetcher = fetcher
        self.committer = committer
        self.outcomes = outcomes
        self.tenant_quota = tenant_quota
        self.metrics = metrics
        self.outage = outage
        self.max_group_qps = max_group_qps
        self.generation = -1  # of the last assignment applied
        self.refreezer = Refreezer()
        # CONTESTED_WAIT groups, until they are served (or assigned away): registered nowhere
        # else, so no fetch, dispatch or hold check sees them (see claim).
        self.waiting: dict[GroupRef, GroupState] = {}
        # When each group taken from a holder that never let go may be served by this process,
        # whatever epoch it is claimed at later (monotonic; pruned at each assignment).
        self._serve_after: dict[GroupRef, float] = {}
        self._waits: set[asyncio.Task[None]] = set()  # one a batch of waiting groups

    async def follow(self, topics_ready: asyncio.Event) -> None:
        """Apply every assignment, once the topics are known."""
        await topics_ready.wait()
        async for owned in self.assignment.updates():
            await self.apply(owned)

    async def apply(self, owned: OwnedGroups) -> None:
        """Release what is no longer ours (or ours at another epoch), claim what is new.

        A contested claim's wait does not hold the next assignment up: the group waits on its
        own (CONTESTED_WAIT, :meth:`_wait_out`) and this returns; a newer assignment that
        arrives meanwhile is applied at once. (It did hold it up: a worker that joined while
        another's session was expiring claimed the groups of the first assignment after the
        expiry, waited, and only then claimed those of the next, a second later: recovery from
        a killed worker 6.1 s against session + 2 s, ``emq bench faults``, worker_kill.)"""
        wanted = dict(owned.groups)
        current = {g.ref: g for g in self.groups.values()}
        for ref, g in current.items():
            if wanted.get(ref) != g.epoch:
                await self.release(g)
        for ref, g in list(self.waiting.items()):
            if wanted.get(ref) != g.epoch:
                await self._abandon(g)
        limit = asyncio.Semaphore(CLAIM_CONCURRENCY)
        new = [
            (ref, e)
            for ref, e in wanted.items()
            if (ref not in current or current[ref].epoch != e) and ref not in self.waiting
        ]
        waits: list[_Wait] = []
        await asyncio.gather(*(self.claim(ref, epoch, limit, waits) for ref, epoch in new))
        if waits:  # served together once the last of their waits ends (see _wait_out)
            task = asyncio.ensure_future(self._wait_out(waits))
            self._waits.add(task)
            task.add_done_callback(self._waits.discard)
        claimed = [c for ref, _ in new if (c := self.groups.get(str(ref))) is not None]
        await self.fetcher.index_claimed(claimed)
        self.generation = owned.generation
        now = time.monotonic()  # (the waits that ended: of groups given up, or served)
        self._serve_after = {r: t for r, t in self._serve_after.items() if t > now}
        self._owned(f"generation {owned.generation}")

    def _owned(self, why: str) -> None:
        self.metrics.groups.set(len(self.groups))
        self.refreezer.owned(len(self.groups))  # (worker.heap: out of the collector's way)
        waiting = f", {len(self.waiting)} waiting out former holders" if self.waiting else ""
        log.info("worker %s owns %d groups%s (%s)", self.id, len(self.groups), waiting, why)

    async def claim(
        self, ref: GroupRef, epoch: int, limit: asyncio.Semaphore, waits: list[_Wait]
    ) -> None:
        """CLAIMING -> OWNED, or -> CONTESTED_WAIT (added to ``waits``), or nothing if fenced
        or assigned away."""
        topic = self.topics.get(ref.topic)
        if topic is None:
            log.warning("assigned %s of an unknown topic; skipped until the topic is known", ref)
            return
        async with limit:
            try:
                # Redis unreachable: retried until it answers or the group is assigned away
                # (a claim that dies would end the assignment task, and with it the worker).
                # One name for every group's claim: an outage logs one warning, not thousands.
                claimed = await self.outage.retry(
                    "group claims",
                    lambda: self.holds.claim(ref, epoch),
                    give_up=lambda: self.assignment.current().groups.get(ref) != epoch,
                )
            except Fenced as e:
                log.warning("not claiming %s: %s", ref, e)
                return
        if claimed is None:
            log.info("not claiming %s: no longer assigned to this worker", ref)
            return
        contested, checkpoints = claimed
        group = GroupState(  # CLAIMING
            ref, epoch, topic, self.quota(topic, ref), checkpoints, self.fetcher.budget
        )
        now = time.monotonic()
        serve_at = self._serve_after.get(ref, 0.0)
        if contested:
            # Its former holder never let go (killed, or cut off): it may push on the store's
            # last word for HOLD_VALID_S; every check it sends from now on finds the group taken.
            serve_at = max(serve_at, now + CONTESTED_WAIT_S)
            self._serve_after[ref] = serve_at
        worked_before = any(c is not None for c in checkpoints)
        if serve_at > now:
            # (Or claimed again, at a new epoch, before an earlier contested wait ended: our own
            # hold hides the former holder from this claim, the wait still applies.)
            group.contest()
            log.info("claimed %s from a holder that did not release it: starting in %.1f s",
                     ref, serve_at - now)  # fmt: skip
            self.waiting[ref] = group
            waits.append((group, serve_at, worked_before))
            return
        self._serve(group, worked_before)

    async def _wait_out(self, waits: list[_Wait]) -> None:
        """CONTESTED_WAIT -> OWNED for the groups of one assignment that had to wait, once the
        last of their waits ended (they were claimed in one round trip: their waits end within
        it of each other), unless assigned away meanwhile; indexed in one round trip."""
        await asyncio.sleep(max(0.0, max(at for _, at, _ in waits) - time.monotonic()))
        served = []
        for group, _, worked_before in waits:
            if self.waiting.get(group.ref) is not group:
                continue  # assigned away or to another epoch meanwhile (apply: _abandon)
            del self.waiting[group.ref]
            group.reconfigure(self.quota(group.topic, group.ref))  # the topic may have changed
            self._serve(group, worked_before)
            served.append(group)
        if served:
            await self.fetcher.index_claimed(served)
            self._owned(f"{len(served)} after their former holders' last word")

    async def _abandon(self, group: GroupState) -> None:
        """A CONTESTED_WAIT group assigned away (or to another epoch) before its wait ended: it
        is never served here. Its hold is kept: the next owner's claim then finds a holder that
        did not let go and waits out the former holder's last word too (released, the store
        would show no holder, and it would start at once). The fleet is told it was let go,
        so that no one waits for this worker's release."""
        del self.waiting[group.ref]
        group.abandon()
        await self.assignment.release(group.ref, group.epoch)
        log.info("gave %s up before its contested wait ended (epoch %d)", group.ref, group.epoch)

    async def stop_waiting(self) -> None:
        """Shutting down: the groups still waiting are given up (as by :meth:`_abandon`)."""
        for task in list(self._waits):
            task.cancel()
        await asyncio.gather(*self._waits, return_exceptions=True)
        for group in list(self.waiting.values()):
            await self._abandon(group)

    def _serve(self, group: GroupState, worked_before: bool) -> None:
        """CLAIMING or CONTESTED_WAIT -> OWNED: registered, fetched from, dispatched."""
        ref, topic = group.ref, group.topic
        if worked_before:
            # Worked before, maybe by another worker until just now: its sends of the last
            # second are in every receiver's window, and this counter never saw them (see
            # capacity.rate, Handover). A group new to everyone starts at once.
            group.counter.quiet(time.time())
        group.own()
        topic.groups[ref.index] = group
        self.groups[str(ref)] = group
        self.fetcher.signal(group)
        self.committer.trim_later(group)

    def quota(self, topic: TopicState, ref: GroupRef) -> int:
        """Group ``ref``'s share of its topic's quota (or of the topic's share of its tenant's)."""
        qps = self.tenant_quota.qps(topic)  # the topic's quota, or its share of its tenant's cap
        quota = _split_quota(qps, self._cap(topic.topic), topic.topic.groups)
        return quota[ref.index] if ref.index < len(quota) else 1

    def requota(self, topic: TopicState) -> None:
        """Apply the topic's quota (or tenant share) and burst to its groups at once."""
        for g in topic.groups.values():
            g.reconfigure(self.quota(topic, g.ref))

    async def release(self, group: GroupState) -> None:
        """Hand a group over: stop taking from it, let its pushes end, checkpoint, release."""
        if group.dropped:  # fenced while an earlier release was awaited: nothing to write
            await self.assignment.release(group.ref, group.epoch)
            return
        group.release()
        group.drop_buffers()
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        while group.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await self.outcomes.flush()
        try:
            await self.committer.write_checkpoints([group])
            await self.committer.forget_finished([group])
            await self.committer.trim(group)
        except BackendUnavailable as e:
            log.warning("final checkpoint or trim of %s not written (%s)", group.ref, e)
        if not group.dropped:  # (fenced meanwhile: DROPPED, its hold is another's now)
            group.released()  # before the await: a hold check meanwhile must not drop it
            await self.holds.let_go([group.ref])
        self.forget(group)
        await self.assignment.release(group.ref, group.epoch)
        log.info("released %s (epoch %d)", group.ref, group.epoch)

    def forget(self, group: GroupState) -> None:
        """Unregister a RELEASED or DROPPED group."""
        group.drop_buffers()
        if group.topic.rates is not None:
            group.topic.rates.forget(group)  # its parked jobs (fetched again by its next owner)
        if self.groups.get(str(group.ref)) is group:
            del self.groups[str(group.ref)]
        if group.topic.groups.get(group.ref.index) is group:
            del group.topic.groups[group.ref.index]

    def drop(self, group: GroupState, reason: str) -> None:
        """A newer owner fenced us: stop touching the group at once and write nothing more."""
        if not group.dropped:
            log.warning("dropping %s: %s", group.ref, reason)
            group.drop()
            self.forget(group)
            self.committer.dirty.discard(group)

    def _cap(self, topic: Topic) -> int:
        return kept_cap(topic.qps, topic.groups, self.max_group_qps)


# A topic's split is the same for each of its groups: computed once, not once per group claimed
# (a 100 000 QPS topic has 667 groups: splitting it for each is quadratic in its groups).
_split_quota = functools.lru_cache(maxsize=1024)(split_quota)
