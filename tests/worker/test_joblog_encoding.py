"""A job record as the worker writes it reads back as the same record (the delivered fast path
and the general one)."""

from __future__ import annotations

import orjson
import pytest

from emq.core.jobs import JobRecord
from worker.joblog import _encode

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
