"""A job record as the worker writes it reads back as the same record (the delivered fast path
and the general one), and a flush writes the pending outcomes in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from emq.core.jobs import JobFacts, JobPlace, JobRecord, JobStore
from emq.core.model import GroupRef, QueueRef
from worker.joblog import JobLog, _encode

RECORDS = [
    JobRecord("msg_a", "delivered", 1_700_000_000_123, 1, 200, None, 12),
    JobRecord("msg_b", "delivered", 1_700_000_000_123, 3, 204, None, 0),
    JobRecord("msg_c", "delivered", 1_700_000_000_123, 1, None, None, None),  # (no fast path)
    JobRecord("msg_d", "retry_wait", 1_700_000_000_123, 2, 503, "busy", None, 1_700_000_001, True),
    JobRecord("msg_e", "dead", 1_700_000_000_123, 8, None, 'timed out "hard"'),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.job_id)
def test_a_record_reads_back_as_written(record: JobRecord) -> None:
    assert JobRecord.from_dict(record.job_id, orjson.loads(_encode(record))) == record


class _Kept(JobStore):
    """A job store that keeps what it is given (only ``record`` is used here)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    async def record(self, records: Sequence[tuple[str, bytes]]) -> None:
        self.records += records

    async def publish(self, snapshots: Sequence[tuple[GroupRef, bytes]]) -> None:
        raise NotImplementedError

    async def facts(self, group: GroupRef, place: JobPlace, job_id: str) -> JobFacts:
        raise NotImplementedError

    async def oldest_ms(self, queues: Sequence[QueueRef]) -> list[int | None]:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


async def test_a_flush_writes_deliveries_and_other_outcomes_in_order() -> None:
    """Deliveries wait as plain tuples, the rarer outcomes as JobRecords; the flush writes both
    as the records they stand for, in the order they came (a later one supersedes)."""
    store = _Kept()
    log = JobLog(store, "w1")
    group: Any = None  # (not read by the log)
    log.delivered(group, "msg_a", 1_700_000_000_123, 1, 200, 12)
    log._add(RECORDS[3])  # a retry_wait
    log.delivered(group, "", 1_700_000_000_124, 1, 200, 3)  # unreadable entry: no record
    log.delivered(group, "msg_d", 1_700_000_000_125, 3, 204, 0)
    await log.flush()
    read = [JobRecord.from_dict(job_id, orjson.loads(raw)) for job_id, raw in store.records]
    assert read == [
        JobRecord("msg_a", "delivered", 1_700_000_000_123, 1, 200, None, 12),
        RECORDS[3],
        JobRecord("msg_d", "delivered", 1_700_000_000_125, 3, 204, None, 0),
    ]
    await log.flush()  # nothing pending: nothing written
    assert len(store.records) == 3
