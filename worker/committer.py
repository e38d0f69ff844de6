"""A worker's progress in the store: checkpoints, trims of delivered entries, DLQ ageing.

Use case: the worker finishes jobs on its hot path and only marks their groups *dirty*; every
``checkpoint_interval_s`` the committer writes the committable offset of every queue that moved
(one round trip), queues whose written offset moved are trimmed every ``trim_interval_s``, and
every owned group's DLQ is aged out every ``dlq_trim_interval_s``. Each write carries the owner
epoch; a group the store reports fenced is dropped by the worker (``drop``). A queue's path::

    dirty --checkpoint written--> to trim --trimmed--> (clean)
      ^  (write failed: dirty again)       (trim failed: to trim again)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import GroupOwner
from emq.core.model import GroupRef, QueueRef
from worker.groups import GroupState
from worker.outage import Outage
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)


class Committer:
    """Checkpoints, trims and DLQ ageing of the groups a worker owns (see the module)."""

    def __init__(
        self,
        queues: GroupOwner,
        settings: WorkerSettings,
        groups: dict[str, GroupState],
        outage: Outage,
        drop: Callable[[GroupState, str], None],
        before_checkpoint: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.queues = queues
        # Written before each checkpoint (the job records of worker.joblog: a checkpoint must
        # not pass jobs whose outcome is not readable yet).
        self._before_checkpoint = before_checkpoint
        self.settings = settings
        self.groups = groups  # by str(GroupRef), owned by the worker
        self.outage = outage
        self._drop = drop
        # Groups with finished jobs since the checkpoint. One set for the committer's life: the
        # worker's hot path holds it and adds to it for every finished job.
        self.dirty: set[GroupState] = set()
        # Queues whose committed offset moved (and was written) since their last trim, with the
        # group that moved them; trimmed every trim_interval_s, so a queue that went quiet
        # loses its delivered entries as surely as a busy one.
        self._to_trim: dict[QueueRef, GroupState] = {}
        self._moved: dict[QueueRef, GroupState] = {}  # moved, checkpoint not yet written

    async def checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.checkpoint_interval_s)
            try:
                await self.checkpoint()
            except BackendUnavailable as e:
                self.outage.noted("checkpointer", e)  # on its own timer: the next tick retries
            else:
                self.outage.resumed("checkpointer")

    async def checkpoint(self) -> None:
        """Write the committable offset of every queue that moved (one round trip)."""
        groups = {g for g in self.dirty if not g.dropped}
        self.dirty.clear()
        await self.write_checkpoints(list(groups))

    async def write_checkpoints(self, groups: list[GroupState]) -> None:
        """Write the checkpoints of ``groups`` (a release writes its group's at once).

        The offsets are taken first, then the job records are written, then the offsets: a
        checkpoint never passes a job whose record is not written yet. (Taken after the records'
        write, they would include the jobs that finished during it, whose records wait for the
        next one: their entries trimmed meanwhile, the job status API found neither.)"""
        items = []
        for g in groups:
            for q, p in g.progress.items():
                if p.committable() is not None:
                    self._moved[q] = g
                items.append((q, p.committed, g.epoch))  # an unmoved offset is a no-op write
        if self._before_checkpoint is not None:
            await self._before_checkpoint()
        if not items:
            return
        try:
            fenced = await self.queues.write_checkpoints(items)
        except BackendUnavailable:
            self.dirty.update(groups)
            raise
        self._drop_fenced(fenced, "fenced at checkpoint")
        for q, _, _ in items:
            moved = self._moved.pop(q, None)
            if moved is not None and not moved.dropped:
                self._to_trim[q] = moved

    async def forget_finished(self, groups: list[GroupState]) -> None:
        """Remove from the store the entries ``groups`` finished above their checkpoints (call
        it after :meth:`write_checkpoints`, when they are let go). The checkpoint stops below
        the oldest unfinished entry, so the next owner would deliver them again: with keys,
        a key's held job let a later job of another key be delivered first, and a release
        forgets the held one (seen: six jobs delivered twice at a join, no crash)."""
        items = [
            (q, g.epoch, above)
            for g in groups
            if not g.dropped
            for q, p in g.progress.items()
            if (above := p.finished_above())
        ]
        if not items:
            return
        if self._before_checkpoint is not None:
            await self._before_checkpoint()  # their job records first (see write_checkpoints)
        self._drop_fenced(await self.queues.forget_finished(items), "fenced at forget")

    # ------------------------------------------------------------------ trimming

    async def trim_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.trim_interval_s)
            try:
                await self.trim()
            except BackendUnavailable as e:
                log.warning("trim failed (%s); will retry", e)

    async def trim_dead_loop(self) -> None:
        """Age out the DLQs of owned groups: an append trims its DLQ, but a quiet one gets none."""
        while True:
            await asyncio.sleep(self.settings.dlq_trim_interval_s)
            try:
                await self.trim_dead()
            except BackendUnavailable as e:
                log.warning("DLQ trim failed (%s); will retry", e)

    async def trim_dead(self) -> int:
        """Trim every owned group's DLQ to its topic's retention, in one round trip."""
        owned = [g for g in self.groups.values() if not g.dropped]
        items = [(g.ref, g.epoch, g.topic.topic.dlq_retention) for g in owned]
        removed = await self.queues.trim_dead(items) if items else 0
        if removed:
            log.info("removed %d dead letters past their topics' retention", removed)
        return removed

    async def trim(self, group: GroupState | None = None) -> None:
        """Remove the delivered entries (at or below the written checkpoint, but the newest
        ``retain_entries``) of every queue that moved since its last trim, or only of
        ``group``'s; one round trip, fenced by the owner epoch."""
        if self.settings.retain_entries < 0:
            self._to_trim.clear()
            return
        if group is None:
            queues, self._to_trim = list(self._to_trim.items()), {}
        else:  # a release: only its three queues (thousands may be released in a row)
            mine = [q for q in group.ref.queues() if self._to_trim.get(q) is group]
            queues = [(q, self._to_trim.pop(q)) for q in mine]
        # A group let go since (released, fenced, or owned again under a new epoch) is skipped:
        # its next owner trims it, and a fenced answer must not drop our newer ownership.
        live = [(q, g) for q, g in queues if not g.dropped and self._owns(g)]
        if not live:
            return
        retain = self.settings.retain_entries
        try:
            fenced = await self.queues.trim_many([(q, g.epoch, retain) for q, g in live])
        except BackendUnavailable:
            for q, g in live:
                self._to_trim.setdefault(q, g)
            raise
        self._drop_fenced(fenced, "fenced at trim")

    def trim_later(self, group: GroupState) -> None:
        """Trim a newly claimed group at the next trim: a previous owner killed between its
        checkpoint and its trim left delivered entries that no later move may ever come for."""
        for q in group.ref.queues():
            self._to_trim[q] = group

    def _owns(self, group: GroupState) -> bool:
        return self.groups.get(str(group.ref)) is group

    def _drop_fenced(self, refs: set[GroupRef], reason: str) -> None:
        for ref in refs:
            group = self.groups.get(str(ref))
            if group is not None:
                self._drop(group, reason)
