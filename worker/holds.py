"""This worker process as the holder of its groups in the store: claims, releases, hold checks.

Use case: the store's word that keeps a worker delivering while ZooKeeper is away (see
:mod:`allocator.fleet`, Vouching). A claim makes this process the group's holder; a release
removes it; every HOLD_CHECK_S the worker asks, in one round trip, which of its groups another
holder claimed since, drops those, and tells the assignment source the store vouches for the
rest until the check's send time + HOLD_VALID_S. A claim that finds a former holder that never
let go is *contested*: the new owner waits CONTESTED_WAIT_S before pushing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import AssignmentSource, Checkpoint, GroupOwner
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

    async def claim(self, ref: GroupRef, epoch: int) -> tuple[bool, list[Checkpoint | None]]:
        """Claim ``ref`` at ``epoch`` (claiming twice is harmless): whether a former holder never
        let go, and the group's checkpoints (final: the claim fenced any former owner's writes)."""
        contested = await self.queues.claim(ref, epoch, self.holder)
        checkpoints = await asyncio.gather(*(self.queues.read_checkpoint(q) for q in ref.queues()))
        return contested, list(checkpoints)

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
        assignment the store vouches for the rest (see allocator.fleet, Vouching)."""
        while True:
            sent = time.monotonic()
            groups = [g for g in self.groups.values() if not g.dropped]
            try:
                holds = [(g.ref, g.epoch) for g in groups]
                lost = await self.queues.check_holds(holds, self.holder)
            except BackendUnavailable as e:
                log.debug("holds not checked: %s", e)
            else:
                for g in groups:
                    if g.ref in lost:
                        self._drop(g, "fenced: claimed by another worker")
                self.assignment.vouched(sent + HOLD_VALID_S)
            await asyncio.sleep(max(0.0, sent + HOLD_CHECK_S - time.monotonic()))
