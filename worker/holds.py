"""This worker process as the holder of its groups in the store: claims, releases, hold checks.

Use case: the store's word that keeps a worker delivering while ZooKeeper is away (see
:mod:`allocator.fleet`, Vouching). A claim makes this process the group's holder; a release
removes it; every HOLD_CHECK_S the worker asks, in one round trip, which of its groups another
holder claimed since, drops those, and tells the assignment source the store vouches for the
rest until the check's send time + HOLD_VALID_S. A claim that finds a former holder that never
let go is *contested*: the new owner waits CONTESTED_WAIT_S before pushing.

Most checks are *probes* (``check_holds(full=False)``): on a standalone Redis every claim that
takes a group from this holder moves the holder's taken stamp in the claim's own script, and a
probe reads only that stamp, the full MGET of every group's holder and epoch following only if
it moved (:mod:`adapters.redis_queue.hold_check`). The fencing argument (see
:mod:`allocator.fleet`) needs, of every check, that "a check sent after a claim finds the
group taken"; a probe keeps it: a claim that took our group is applied, with its stamp, when
the claim is answered; a probe sent after that reads the new stamp (a stamp never repeats), so
it sends the full check, which finds the group taken and drops it before anything is vouched.
A probe that finds the stamp unchanged proves no claim took any of our groups since the last
clean full check, whose answer, nothing lost, therefore still holds: it vouches from its own
send time, as a full check does, and the contested wait (CONTESTED_WAIT_S from the claim's
answer, longer than HOLD_VALID_S from any check sent before it) is untouched.

A probe trusts that the stamp's write reached the store with the claim's; what no claim
wrote (a failover that lost writes, a hand edit) it cannot see. So at least every
FULL_HOLD_CHECK_S (by send time) the check is full, as every check was: such a loss keeps a
cut-off worker pushing at most that long, never forever. On a Redis Cluster the claims stamp
nothing (the stamp's key would sit on another slot) and every check is full.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence

from emq.core.errors import BackendUnavailable, Fenced
from emq.core.interfaces import AssignmentSource, Claimed, GroupOwner
from emq.core.model import GroupRef
from worker.groups import GroupState

log = logging.getLogger(__name__)

# Holds (see allocator.fleet, Vouching): every HOLD_CHECK_S the worker asks the store whether it
# still holds its groups; a check vouches for HOLD_VALID_S from its send time. A contested claim
# waits out a former holder's last word: HOLD_VALID_S, plus a margin for clocks and scheduling.
HOLD_CHECK_S = 0.25
# 0.6 s: two checks may be missed before a cut-off worker pauses; a shorter word shortens the
# contested wait, which every recovery from a killed worker pays (issue 11: session + 2 s).
HOLD_VALID_S = 0.6
CONTESTED_WAIT_S = HOLD_VALID_S + 0.4
# A full hold check at least this often (see the module): 1 in 8 of the checks while idle.
FULL_HOLD_CHECK_S = 2.0

_Claim = tuple[GroupRef, int, "asyncio.Future[Claimed]"]


class Holds:
    """Claims, releases and hold checks of one worker process (see the module)."""

    def __init__(
        self,
        worker_id: str,
        queues: GroupOwner,
        assignment: AssignmentSource,
        groups: dict[str, GroupState],
        drop: Callable[[GroupState, str], None],
    ) -> None:
        # This process as a holder of groups: a restarted worker with the same id is another one.
        self.holder = f"{worker_id}/{os.getpid()}/{secrets.token_hex(4)}"
        self.queues = queues
        self.assignment = assignment
        self.groups = groups  # by str(GroupRef), owned by the worker
        self._drop = drop
        self._claims: list[_Claim] = []  # claims of this loop iteration, sent together
        self._batches: set[asyncio.Task[None]] = set()
        self._checked: list[GroupState] = []  # the groups of the last hold check, and their holds
        self._checked_holds: list[tuple[GroupRef, int]] = []

    async def claim(self, ref: GroupRef, epoch: int) -> Claimed:
        """Claim ``ref`` at ``epoch`` (claiming twice is harmless): whether a former holder never
        let go, and the group's checkpoints (final: the claim fenced any former owner's writes).

        The claims made in one loop iteration go to the store together (one round trip for
        the batch, :meth:`GroupOwner.claim_groups`): a worker given thousands of groups claims
        them as fast as it claims a few dozen, instead of one round trip each."""
        waiter: asyncio.Future[Claimed] = asyncio.get_running_loop().create_future()
        self._claims.append((ref, epoch, waiter))
        if len(self._claims) == 1:
            asyncio.get_running_loop().call_soon(self._send_claims)
        return await waiter

    def _send_claims(self) -> None:
        batch, self._claims = self._claims, []
        task = asyncio.ensure_future(self._claim_batch(batch))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _claim_batch(self, batch: list[_Claim]) -> None:
        """Claim ``batch`` and hand each waiter its answer (or the error the batch met)."""
        try:
            answers = await self.queues.claim_groups([(r, e) for r, e, _ in batch], self.holder)
        except asyncio.CancelledError:
            for *_, waiter in batch:
                waiter.cancel()
            raise
        except Exception as e:  # (BackendUnavailable above all: each claim retries alone)
            for *_, waiter in batch:
                if not waiter.done():
                    waiter.set_exception(e)
            return
        for (*_, waiter), answer in zip(batch, answers, strict=True):
            if waiter.done():  # its claim was given up (cancelled) meanwhile
                continue
            if isinstance(answer, Fenced):
                waiter.set_exception(answer)
            else:
                waiter.set_result(answer)

    async def release(self, groups: Sequence[GroupState]) -> None:
        """We stopped touching ``groups``: their next owner need not wait (see Ownership.claim)."""
        await self.let_go([g.ref for g in groups if not g.dropped])

    async def let_go(self, refs: list[GroupRef]) -> None:
        if not refs:
            return
        try:
            await self.queues.release_holds(refs, self.holder)
        except BackendUnavailable as e:  # their next owner waits a little longer: harmless
            log.warning("holds of %d group(s) not released (%s)", len(refs), e)

    async def check_loop(self) -> None:
        """Every HOLD_CHECK_S: drop the groups another worker claimed since, and tell the
        assignment the store vouches for the rest (see allocator.fleet, Vouching). A probe
        while a full check was sent less than FULL_HOLD_CHECK_S ago (see the module)."""
        full_sent = -FULL_HOLD_CHECK_S  # the send time of the last full check that answered
        while True:
            sent = time.monotonic()
            groups = [g for g in self.groups.values() if not g.dropped]
            full = sent - full_sent >= FULL_HOLD_CHECK_S
            try:
                lost = await self.queues.check_holds(self._holds(groups), self.holder, full)
            except BackendUnavailable as e:
                log.debug("holds not checked: %s", e)
            else:
                if full:
                    full_sent = sent
                for g in groups if lost else ():
                    if g.ref in lost:
                        self._drop(g, "fenced: claimed by another worker")
                self.assignment.vouched(sent + HOLD_VALID_S)
            await asyncio.sleep(max(0.0, sent + HOLD_CHECK_S - time.monotonic()))

    def _holds(self, groups: list[GroupState]) -> list[tuple[GroupRef, int]]:
        """``(ref, epoch)`` of ``groups``: the same list while the groups are the same, so that
        the store may reuse the check it built for it (a group's ref and epoch never change)."""
        if groups != self._checked:  # (GroupState compares by identity: cheap)
            self._checked = groups
            self._checked_holds = [(g.ref, g.epoch) for g in groups]
        return self._checked_holds
