"""``emq bench faults`` without running a trial: bad arguments are refused before anything
starts, and how a trial reads recovery from a delivery log."""

from __future__ import annotations

import pytest

from emq.bench import faults
from emq.bench.promises import Delivery
from tests.bench.cli import bench_error


def test_bad_arguments_are_one_line_and_a_non_zero_exit_before_anything_runs() -> None:
    for args, word in ((["--trials", "worker_kill,nope"], "nope"), (["--duration-s", "0"], "--")):
        line = bench_error("faults", *args)
        assert line.startswith("emq: error: ") and word in line, line


def test_recovery_is_the_slowest_topic_with_a_backlog_to_deliver_again() -> None:
    log = [Delivery(t, f"a{t}", "a") for t in (1.0, 2.0, 3.0, 9.0)]  # the killed worker's
    log += [Delivery(t, f"b{t}", "b") for t in (1.0, 2.0, 3.0, 3.7, 4.0)]  # a survivor's
    log += [Delivery(1.0, "c1", "c")]  # drained before the kill: not waiting for anything
    assert faults._recovery_s(log, 3.5) == pytest.approx(5.5)
    assert faults._recovery_s(log, 10.0) is None  # everything had drained
