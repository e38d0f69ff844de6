"""The ``zk_quorum`` fault trial's reading of the workers' logs (the trial itself runs in
``emq bench faults``; tests/adapters/test_zk_quorum.py judges the recovery on a real ensemble)."""

from __future__ import annotations

import time

import pytest

from emq.bench.faults_zk import applied_at


def test_a_workers_apply_time_is_read_from_its_log_line() -> None:
    log = (
        "2026-11-29 00:10:00,120 INFO worker.runtime: topic online/t/a: quota 7 QPS over 1 groups\n"
        "2026-11-29 00:10:01,250 INFO worker.runtime: topic online/t/a: quota 9 QPS over 1 groups\n"
    )
    expected = time.mktime(time.strptime("2026-11-29 00:10:01", "%Y-%m-%d %H:%M:%S")) + 0.25
    assert applied_at(log, "online/t/a", 9) == pytest.approx(expected)
    assert applied_at(log, "online/t/a", 8) is None
    assert applied_at(log, "online/t/b", 7) is None
