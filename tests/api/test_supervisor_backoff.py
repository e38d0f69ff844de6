"""The supervisor's restart policy, deterministically: a crash loop backs off, a child that had
listened for a while restarts at once, a child that cannot listen stops everything."""

from __future__ import annotations

import pytest

from emq.api import supervisor
from emq.api.supervisor import BACKOFF_MAX_S, BACKOFF_S, FATAL, STABLE_S, Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _supervisor(clock: Clock) -> Supervisor:
    return Supervisor(lambda listening: None, 2, "127.0.0.1", 8080, clock=clock)


def test_a_crash_loop_backs_off_up_to_the_cap(clock: Clock) -> None:
    sup = _supervisor(clock)
    slot = sup._slots[0]
    delays = []
    for _ in range(10):
        slot.pid = 4242  # started, died before listening
        sup._exited(slot, 1)
        assert slot.restart_at is not None
        delays.append(slot.restart_at - clock.now)
    assert delays[:4] == [BACKOFF_S, 2 * BACKOFF_S, 4 * BACKOFF_S, 8 * BACKOFF_S]
    assert max(delays) == BACKOFF_MAX_S and delays[-1] == BACKOFF_MAX_S


def test_a_child_that_listened_long_enough_restarts_at_the_first_delay(clock: Clock) -> None:
    sup = _supervisor(clock)
    slot = sup._slots[0]
    slot.deaths = 6
    slot.pid, slot.ready_at = 4242, clock.now
    clock.now += STABLE_S
    sup._exited(slot, -9)
    assert slot.restart_at == clock.now + BACKOFF_S and slot.deaths == 1


def test_a_child_that_cannot_listen_stops_the_others(clock: Clock) -> None:
    sup = _supervisor(clock)
    sup._slots[1].pid = 0  # (no process to signal)
    sup._exited(sup._slots[0], FATAL)
    assert sup._failure is not None and "could not start" in sup._failure
    assert sup._stopping_since == clock.now
    assert all(s.restart_at is None for s in sup._slots)


def test_port_zero_needs_a_single_process() -> None:
    with pytest.raises(supervisor.ConfigError, match="needs a port"):
        Supervisor(lambda listening: None, 2, "127.0.0.1", 0)


def test_readiness_is_announced_once_every_child_listens(
    clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    sup = _supervisor(clock)
    sup._slots[0].pid, sup._slots[1].pid = 11, 22
    sup._ready(b"1")  # a read may end mid-line
    sup._ready(b"1\n2")
    assert sup._slots[0].ready_at == clock.now and sup._slots[1].ready_at is None
    assert capsys.readouterr().out == ""
    sup._ready(b"2\n")
    assert capsys.readouterr().out == "emq api listening on http://127.0.0.1:8080 (2 processes)\n"
    sup._ready(b"22\n")  # (again: a restarted child's line) no second announcement
    assert capsys.readouterr().out == ""
