"""A group's counter in the worker (worker.groups.GrantLog with the worker's window, back-dating
and bucket) under a dispatcher that is sometimes late: what a backlogged group keeps of its
quota, and that no sliding second holds more than the quota."""

from __future__ import annotations

from capacity.rate import QpsCounter
from worker.groups import CATCH_UP_S, GRANT_WINDOW_S, GrantLog

QPS = 150
SECONDS = 30.0
START = 1_700_000_000.0


def _run(counter: QpsCounter, stall_every_s: float, stall_s: float) -> list[float]:
    """A backlogged group served exactly when its counter can grant (Dispatcher._delay), except
    that every ``stall_every_s`` the loop stands still for ``stall_s`` (another process has the
    CPU); each job goes out at its grant. Returns the grants' times."""
    sends: list[float] = []
    t = START
    next_stall = START + stall_every_s
    while t < START + SECONDS:
        sends += [t] * counter.reserve(10_000, t)
        t += max(0.0005, counter.wait_s(t))  # (MIN_WAIT_S)
        if t >= next_stall:
            t += stall_s
            next_stall += stall_every_s
    return sends


def _busiest(sends: list[float]) -> int:
    best = j = 0
    for i, t in enumerate(sends):
        while sends[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def _worker_counter(burst_s: float) -> GrantLog:
    return GrantLog(QPS, window_s=GRANT_WINDOW_S, burst_s=burst_s)


def test_a_late_dispatcher_keeps_the_quota_its_log_freed_meanwhile() -> None:
    # Stalls of 60 ms three times a second (beside a busy loop: 30-50 ms, several a second).
    kept = _run(_worker_counter(CATCH_UP_S), 0.33, 0.06)
    rate = len(kept) / SECONDS / QPS
    assert rate >= 0.98, rate
    assert _busiest(kept) <= QPS
    # The bucket the counter had (30 ms of accrual) lost what accrued past it in each stall,
    # and the self-clocked log never gave it back: the same run keeps markedly less.
    lost = _run(_worker_counter(0.03), 0.33, 0.06)
    assert len(lost) / SECONDS / QPS < rate - 0.05, (len(lost), len(kept))
    assert _busiest(lost) <= QPS


def test_an_on_time_dispatcher_reaches_the_window_s_ceiling() -> None:
    sends = _run(_worker_counter(CATCH_UP_S), SECONDS * 2, 0.0)
    rate = len(sends) / SECONDS / QPS
    assert 1 / GRANT_WINDOW_S - 0.005 <= rate <= 1.0, rate
    assert _busiest(sends) <= QPS


def test_after_idle_a_group_sends_at_most_its_catch_up_at_once() -> None:
    counter = _worker_counter(CATCH_UP_S)
    assert counter.reserve(10_000, START) == int(1 + QPS * CATCH_UP_S)  # 16 at 150 QPS
    assert counter.reserve(10_000, START) == 0  # then at the quota's pace
    assert counter.reserve(10_000, START + 0.1001) == 15  # (0.1 s of accrual)
