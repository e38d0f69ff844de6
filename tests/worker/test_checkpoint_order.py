"""A checkpoint never passes a job whose record is not written yet (worker.committer): the
offsets are taken before the job records are written, so a job that finishes while they are
being written waits for the next checkpoint. (Taken after, the checkpoint passed it, its entry
was trimmed, and the job status API found neither the entry nor the record: a 404 for a job
just delivered, seen in CI under load.) The interleaving is forced: the second job finishes
inside the records' write."""

from __future__ import annotations

from typing import Any

from emq.core.interfaces import Offset
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from worker.committer import Committer
from worker.outage import Outage
from worker.progress import Progress
from worker.settings import WorkerSettings


class _Group:  # what the committer reads of a GroupState
    def __init__(self, progress: dict[Any, Progress]) -> None:
        self.progress, self.epoch, self.dropped = progress, 1, False


class _Owner:
    def __init__(self) -> None:
        self.written: list[list[tuple[Any, Offset, int]]] = []

    async def write_checkpoints(self, items: list[tuple[Any, Offset, int]]) -> set[GroupRef]:
        self.written.append(list(items))
        return set()


async def test_a_job_finished_while_the_records_are_written_waits_for_the_next_checkpoint() -> None:
    queue = GroupRef(TopicRef(Namespace.ONLINE, "acme", "t"), 0).queue(Priority.MEDIUM)
    progress = Progress(Offset(0, 0))
    first, second = Offset(1, 0), Offset(2, 0)
    progress.fetched(first)
    progress.fetched(second)
    progress.finished(first)
    group = _Group({queue: progress})
    recorded: list[str] = []  # the job records written, in order

    async def write_records() -> None:
        recorded.append("first" if "first" not in recorded else "second")
        if len(recorded) == 1:
            progress.finished(second)  # finishes meanwhile: its record is not in this write

    owner = _Owner()
    committer = Committer(owner, WorkerSettings(), {}, Outage(), lambda g, r: None, write_records)
    committer.dirty.add(group)  # type: ignore[arg-type]
    await committer.checkpoint()
    assert owner.written == [[(queue, first, 1)]]  # not past the second job: no record yet
    committer.dirty.add(group)  # type: ignore[arg-type]
    await committer.checkpoint()
    assert recorded == ["first", "second"] and owner.written[-1] == [(queue, second, 1)]
