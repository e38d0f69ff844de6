"""The send governor: fewer pushes at once only while the worker's own CPU is the limit."""

from __future__ import annotations

import subprocess
import sys

from worker.dispatch import SendGovernor


def _run(gov: SendGovernor, shares: list[float], waiting: int = 100, stuck: int = 0) -> list[int]:
    """Feed one period per CPU share; the limits applied."""
    if gov._at is None:
        gov.update(0.0, 0.0, waiting, stuck)
    mono, cpu = gov._at, gov._cpu  # continue from the governor's last reading
    out = []
    for share in shares:
        mono += gov.period_s
        cpu += share * gov.period_s
        limit = gov.update(mono, cpu, waiting, stuck)
        assert limit is not None
        out.append(limit)
    return out


def test_a_saturated_loop_sheds_concurrency_down_to_the_floor() -> None:
    limits = _run(SendGovernor(256, 64), [1.0] * 20)
    assert limits[0] == 192 and limits == sorted(limits, reverse=True)
    assert limits[-1] == 64  # never under the floor


def test_an_idle_loop_with_jobs_waiting_grows_back_to_every_sender() -> None:
    gov = SendGovernor(256, 64)
    _run(gov, [1.0] * 20)
    assert _run(gov, [0.5] * 20)[-1] == 256
    # Between the thresholds nothing moves; without waiting jobs an idle loop does not grow.
    steady = SendGovernor(256, 64)
    _run(steady, [1.0] * 3)
    held = steady.limit
    assert set(_run(steady, [0.8] * 5)) == {held}
    assert set(_run(steady, [0.1] * 5, waiting=0)) == {held}


def test_stuck_pushes_do_not_count_against_the_limit() -> None:
    gov = SendGovernor(256, 64)
    assert _run(gov, [1.0] * 20, stuck=40)[-1] == 104  # 64 for live endpoints + 40 hanging
    assert _run(SendGovernor(96, 64), [1.0] * 20, stuck=100)[-1] == 96  # never over the pool


def test_calls_within_a_period_change_nothing() -> None:
    gov = SendGovernor(256, 64)
    assert gov.update(0.0, 0.0, 1, 0) is None
    half = gov.period_s / 2
    assert gov.update(half, half, 1, 0) is None  # under period_s
    assert gov.limit == 256


def test_a_senders_setting_under_one_is_one_clear_error() -> None:
    for var in ("EMQ_WORKER_SENDERS", "EMQ_WORKER_SENDERS_MIN"):
        done = subprocess.run(
            [sys.executable, "-m", "emq", "config", "show"],
            env={"PATH": "/usr/bin:/bin", var: "0"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0
        assert done.stderr == f"emq: error: {var}: must be at least 1, got 0\n"
