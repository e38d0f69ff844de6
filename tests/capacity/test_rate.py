from __future__ import annotations

import math
import sys
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.rate import QpsCounter


def _simulate(
    qps: int, tick_s: float, seconds: float, start: float, jitter: list[float]
) -> list[float]:
    """A backlogged group dispatched every ``tick_s`` (plus jitter): the send times."""
    counter = QpsCounter(qps)
    sends: list[float] = []
    t = start
    i = 0
    while t < start + seconds:
        sends += [t] * counter.reserve(10_000, t)
        t += tick_s + jitter[i % len(jitter)]
        i += 1
    return sends


def _max_window(sends: list[float], width: float = 1.0) -> int:
    best, j = 0, 0
    for i, t in enumerate(sends):
        while sends[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


@settings(max_examples=80, deadline=None)
@given(
    qps=st.integers(1, 2000),
    start=st.floats(1_700_000_000, 1_700_000_001),
    jitter=st.lists(st.floats(0, 0.05), min_size=1, max_size=10),
)
def test_any_one_second_window_stays_near_the_quota(
    qps: int, start: float, jitter: list[float]
) -> None:
    sends = _simulate(qps, 0.01, 5.0, start, jitter)
    assert _max_window(sends) <= qps  # sliding: no burst on top
    assert max(Counter(math.floor(t) for t in sends).values()) <= qps


@settings(max_examples=60, deadline=None)
@given(qps=st.integers(1, 2000), start=st.floats(1_700_000_000, 1_700_000_001))
def test_a_backlogged_group_gets_its_quota_every_wall_clock_second(qps: int, start: float) -> None:
    sends = _simulate(qps, 0.01, 6.0, start, [0.0])
    per_second = Counter(math.floor(t) for t in sends)
    full = [per_second[s] for s in range(math.floor(start) + 1, math.floor(start) + 5)]
    # A grant waits for the tick after the one it replaces left the window: up to a tick late.
    assert all(n <= qps for n in full), full
    assert sum(full) >= 4 * qps * 0.98 - 1


def test_an_idle_group_waking_mid_second_gets_no_burst() -> None:
    c = QpsCounter(150, burst_s=0.01)
    assert c.reserve(1000, 100.5) == 2  # one burst's worth (2.5 tokens), not half the quota
    assert c.reserve(1000, 100.6) == 2
    assert c.reserve(1000, 100.61) == 2  # 0.5 left + 1.5 accrued


def test_rollback_returns_the_budget() -> None:
    c = QpsCounter(100, burst_s=0.01)  # burst 2 tokens
    assert c.reserve(5, 10.0) == 2
    assert c.available(10.0) == 0
    c.rollback(1, 10.0)
    assert c.available(10.0) == 1
    c.rollback(1, 11.0)  # the newest grant is undone: its stamp leaves the log
    assert c.available(11.0) == 2


def test_a_second_never_exceeds_the_quota_even_with_rollbacks() -> None:
    c = QpsCounter(10, burst_s=1.0)
    granted = 0
    t = 50.0
    while t < 51.0:  # (a second from 50.0: also a sliding window)
        got = c.reserve(3, t)
        c.rollback(got // 2, t)
        granted += got - got // 2
        t += 0.01
    assert granted <= 10


def test_quota_change_applies_at_once() -> None:
    c = QpsCounter(100)
    sent = sum(c.reserve(1000, 5.0 + i / 100) for i in range(100))
    assert 99 <= sent <= 100
    c.set_qps(10)
    # The last window already holds more than 10: nothing until its newest 10 grants (at about
    # 5.9) age out, then 10 a second.
    assert sum(c.reserve(1000, 6.0 + i / 100) for i in range(80)) == 0
    assert 18 <= sum(c.reserve(1000, 6.8 + i / 100) for i in range(200)) <= 20


@settings(max_examples=300, deadline=None)
@given(
    qps=st.integers(1, 50),
    burst_s=st.sampled_from([0.0, 0.03, 0.5, 2.0]),
    steps=st.lists(
        st.tuples(st.floats(0, 0.3), st.integers(0, 60), st.integers(0, 60)),
        min_size=1,
        max_size=120,
    ),
)
def test_no_window_ever_holds_more_than_the_quota(
    qps: int, burst_s: float, steps: list[tuple[float, int, int]]
) -> None:
    """Any sequence of reserves and rollbacks, at any times: every sliding window of one
    second holds at most qps grants (rollback undoes the newest grants)."""
    c = QpsCounter(qps, burst_s=burst_s)
    grants: list[float] = []
    t = 1_700_000_000.25
    for dt, want, back in steps:
        t += dt
        grants += [t] * c.reserve(want, t)
        back = min(back, len(grants))
        c.rollback(back, t)
        del grants[len(grants) - back :]
    assert _max_window(grants) <= qps


def test_a_quiet_counter_goes_on_at_the_pace_without_a_burst() -> None:
    c = QpsCounter(50)
    c.quiet(100.0)
    assert c.reserve(10, 100.0) == 0  # the former owner's last window counts as full
    got = [t / 1000 for t in range(100_000, 102_000) if c.reserve(1, t / 1000)]
    # No silent second: the worst case holds the bucket's burst (2 at 50 QPS) stamped now, so
    # the first grant comes the burst's intervals and one more later.
    assert 100.0 < got[0] <= 100.0 + 3 / 50 + 1e-9
    assert len([t for t in got if t < 101.0]) <= 50  # at the pace, not a burst
    assert len(got) >= 95  # two windows' worth at the full pace


def test_the_clock_stepping_back_far_does_not_stall() -> None:
    c = QpsCounter(5, burst_s=1.0)
    assert c.reserve(10, 100.0) == 5
    assert c.reserve(10, 100.5) == 0
    assert c.reserve(10, 50.0) >= 1  # a minute back: the log is emptied


@settings(max_examples=300, deadline=None)
@given(
    qps=st.integers(1, 40),
    steps=st.lists(
        st.tuples(st.floats(0, 0.4), st.integers(0, 30), st.integers(0, 30), st.integers(0, 5)),
        min_size=1,
        max_size=100,
    ),
)
def test_moved_grants_keep_every_window_within_the_quota(
    qps: int, steps: list[tuple[float, int, int, int]]
) -> None:
    """Reserves, rollbacks and grants moved to a later send time (restamp), at any times: the
    grants where they finally count never put more than qps in any one-second window."""
    c = QpsCounter(qps, burst_s=0.5)
    grants: list[float] = []
    t = 1_700_000_000.25
    for dt, want, back, move in steps:
        t += dt
        grants += [t] * c.reserve(want, t)
        back = min(back, len(grants))
        c.rollback(back, t)
        del grants[len(grants) - back :]
        for old in sorted(set(grants))[:move]:  # the oldest grants are sent only now
            grants.remove(old)
            if c.restamp(old, t):
                grants.append(t)
        grants.sort()
    assert _max_window(grants) <= qps


def test_wait_s_is_the_time_until_the_next_grant() -> None:
    counter = QpsCounter(10, burst_s=0.0, window_s=1.005)  # one token at a time
    assert counter.wait_s(100.0) == 0.0
    assert counter.reserve(5, 100.0) == 1
    assert math.isclose(counter.wait_s(100.0), 0.1, abs_tol=1e-6)  # the next token
    assert math.isclose(counter.wait_s(100.04), 0.06, abs_tol=1e-6)
    assert counter.reserve(1, 100.04) == 0  # (it was right: nothing yet)


def test_wait_s_waits_for_the_oldest_grant_to_leave_the_sliding_log() -> None:
    counter = QpsCounter(3, burst_s=1.0, window_s=1.005)  # the bucket allows the whole quota
    assert counter.reserve(3, 100.0) == 3
    # Tokens are back by 101.0, the log frees a grant only at 101.005.
    assert math.isclose(counter.wait_s(101.0), 0.005, abs_tol=1e-6)
    assert counter.reserve(1, 101.0) == 0
    assert counter.reserve(1, 101.0 + counter.wait_s(101.0)) == 1


def test_a_group_served_when_wait_s_says_keeps_the_full_rate() -> None:
    # A backlogged group looked at exactly when its counter can grant (the dispatcher's
    # schedule) sends qps per window_s: nothing is lost between the grants.
    counter = QpsCounter(150, window_s=1.005)
    t, sends = 1_700_000_000.0, 0
    end = t + 20.0
    while t < end:
        sends += counter.reserve(10_000, t)
        t += max(0.0005, counter.wait_s(t))
    assert sends >= 150 * 20 / 1.005 - 2
    assert sends <= 150 * 20 / 1.005 + counter.burst + 1


# --------------------------------------------------------------------------- burst (extra)


def _grants_in_any_window(stamps: list[float], window: float) -> int:
    stamps.sort()
    j, most = 0, 0
    for i, t in enumerate(stamps):
        while stamps[j] <= t - window:
            j += 1
        most = max(most, i - j + 1)
    return most


def test_burst_after_idle_then_the_steady_pace() -> None:
    c = QpsCounter(100, extra=50, window_s=1.0)
    assert c.reserve(1000, 0.0) == 1 + 3 + 50  # the bucket: 1 + qps * burst_s + extra
    stamps = [0.0] * 54
    t = 0.0
    while t < 5.0:  # backlogged: every millisecond it asks for all it can get
        t += 0.001
        stamps += [t] * c.reserve(1000, t)
    assert _grants_in_any_window(stamps, 1.0) <= 100 + 50  # the documented bound
    late = [s for s in stamps if 3.0 <= s < 5.0]
    assert 195 <= len(late) <= 201  # the sustained rate is the quota, not quota + burst


def test_burst_comes_back_only_while_the_group_sends_below_its_quota() -> None:
    c = QpsCounter(10, extra=5, window_s=1.0)
    c.reserve(100, 0.0)
    assert c.reserve(100, 0.5) <= 6  # refilled at the quota, not the burst
    assert c.reserve(100, 10.0) == 1 + 5  # idle long enough: the whole burst again


def test_no_burst_is_the_counter_of_old() -> None:
    a, b = QpsCounter(50, window_s=1.0), QpsCounter(50, window_s=1.0, extra=0)
    t = 0.0
    while t < 3:
        t += 0.0007
        assert a.reserve(7, t) == b.reserve(7, t)


@settings(max_examples=300, deadline=None)
@given(
    qps=st.integers(1, 60),
    burst_s=st.sampled_from([0.0, 0.03, 0.5]),
    extra=st.integers(0, 20),
    before=st.lists(st.tuples(st.floats(0, 0.3), st.integers(0, 60)), min_size=1, max_size=60),
    after=st.lists(st.tuples(st.floats(0, 0.3), st.integers(0, 60)), min_size=1, max_size=60),
    gap=st.floats(0, 0.2),
)
def test_a_handover_keeps_every_window_within_the_quota(
    qps: int,
    burst_s: float,
    extra: int,
    before: list[tuple[float, int]],
    after: list[tuple[float, int]],
    gap: float,
) -> None:
    """A former owner granting as it may until it stops, then a new owner whose counter was
    quieted (the former owner's sends unknown to it): no one-second window across the handover
    holds more than the group's quota and burst, whatever the former owner sent last."""
    old = QpsCounter(qps, burst_s=burst_s, extra=extra)
    grants: list[float] = []
    t = 1_700_000_000.0
    for dt, want in before:
        t += dt
        grants += [t] * old.reserve(want, t)
    t += gap
    new = QpsCounter(qps, burst_s=burst_s, extra=extra)
    new.quiet(t)
    for dt, want in after:
        t += dt
        grants += [t] * new.reserve(want, t)
    assert _max_window(grants) <= qps + extra


class _RemovingCounter(QpsCounter):
    """The restamp before it bisected: ``deque.remove`` of the grant (the reference)."""

    def restamp(self, granted_at: float, now: float) -> float | None:
        now = self._advance(now)
        self._log_room(now)
        log = self._log
        if log and log[0] <= granted_at <= log[-1]:
            try:
                log.remove(granted_at)
            except ValueError:
                pass
            else:
                log.append(now)
                return now
        return self._log[-1] if self.reserve(1, now) else None


def _steps(most_moved: int) -> st.SearchStrategy[list[tuple[float, int, int, int]]]:
    """Steps of a counter's life: (time passing, grants wanted, rolled back, grants moved)."""
    return st.lists(
        st.tuples(
            st.floats(0, 0.4), st.integers(0, 30), st.integers(0, 30), st.integers(0, most_moved)
        ),
        min_size=1,
        max_size=100,
    )


@settings(max_examples=300, deadline=None)
@given(qps=st.integers(1, 40), quiet_first=st.booleans(), steps=_steps(8))
def test_restamp_by_bisection_moves_the_grant_deque_remove_moved(
    qps: int, quiet_first: bool, steps: list[tuple[float, int, int, int]]
) -> None:
    """The same answers and the same log as the linear search, whatever the grants moved
    (oldest, newest, ones never granted, duplicates) and after a handover's quiet()."""
    fast, slow = QpsCounter(qps, burst_s=0.5), _RemovingCounter(qps, burst_s=0.5)
    t = 1_700_000_000.25
    grants: list[float] = []
    if quiet_first:
        fast.quiet(t)
        slow.quiet(t)
    for dt, want, back, move in steps:
        t += dt
        got = fast.reserve(want, t)
        assert slow.reserve(want, t) == got
        grants += [t] * got
        fast.rollback(back, t)
        slow.rollback(back, t)
        del grants[max(0, len(grants) - back) :]
        picks = sorted(set(grants))
        for old in picks[:move] + picks[-move:] + [t - 0.0001]:  # oldest, newest, unknown
            assert fast.restamp(old, t) == slow.restamp(old, t)
        assert list(fast._log) == list(slow._log)
        assert fast.available(t) == slow.available(t)


def test_idle_counters_share_one_empty_log_until_their_first_grant() -> None:
    # A worker owning thousands of idle groups: no 760-byte deque per group that never granted.
    a, b = QpsCounter(3, extra=2), QpsCounter(3, extra=2)  # a burst of 3
    now = 1_700_000_000.0
    assert a.wait_s(now) == 0.0 and a.available(now) == 3 and b.available(now) == 3
    a.rollback(2, now)  # nothing granted: nothing to undo
    a.available(now - 5)  # the clock stepped back: the shared log is cleared, still empty
    assert sys.getsizeof(a) + sys.getsizeof(b) < 200 and a.available(now) == 3
    assert a.reserve(3, now) == 3
    assert a.available(now + 0.5) == 1 and b.available(now + 0.5) == 3  # a's log is its own
    assert b.reserve(1, now + 0.5) == 1 and b.restamp(now + 0.5, now + 0.6)
    assert QpsCounter(3, extra=2).reserve(5, now) == 3  # a new counter's log is empty still


# --------------------------------------------------------------------------- back-dating


class _BackDated(QpsCounter):
    __slots__ = ()
    back_s = 0.005


class _Spare(_BackDated):
    __slots__ = ()
    spare = 1  # (see "spare lane" below)


@settings(max_examples=300, deadline=None)
@given(
    spare=st.booleans(),
    qps=st.integers(1, 40),
    extra=st.integers(0, 5),
    quiet_first=st.booleans(),
    steps=_steps(5),
)
def test_back_dated_grants_keep_every_window_and_stay_near_their_sends(
    spare: bool, qps: int, extra: int, quiet_first: bool, steps: list[tuple[float, int, int, int]]
) -> None:
    """Grants stamped up to back_s before they are made, rolled back, moved to a later send
    (restamp): the stamps never put more than qps + extra (+ 1 with a spare lane) in any
    window, each lies at most back_s before the time it was made or moved, never after it, and
    the grants made up to any time never exceed the bucket's burst plus qps a second (a spare
    lane adds nothing to the pace)."""
    c = (_Spare if spare else _BackDated)(qps, burst_s=0.5, extra=extra)
    t = start = 1_700_000_000.25
    if quiet_first:
        c.quiet(t)
    stamps: list[float] = list(c._log)  # every stamp that counts, gone from the log or not
    made = 0
    for dt, want, back, move in steps:
        t += dt
        granted = c.reserve(want, t)
        if granted:
            assert t - c.back_s <= c.newest <= t
            stamps += [c.newest] * granted
        back = min(back, granted)  # (the dispatcher rolls back in the same tick)
        c.rollback(back, t)
        del stamps[len(stamps) - back :]
        made += granted - back
        assert made <= c.burst + (t - start) * qps + 1e-6
        for old in sorted(set(s for s in c._log if s > t - c.window_s))[:move]:
            stamps.remove(old)
            moved = c.restamp(old, t)
            if moved is not None:
                assert max(old, t - c.back_s) <= moved <= t
                stamps.append(moved)
        stamps.sort()
        assert sorted(c._log) == list(c._log)  # (restamp's bisection needs it sorted)
    assert _grants_in_any_window(stamps, c.window_s) <= qps + extra + c.spare


def _served_late(counter: QpsCounter, late_s: float, seconds: float) -> int:
    """Grants of a backlogged group looked at ``late_s`` after its counter can grant."""
    t, sends = 1_700_000_000.0, 0
    end = t + seconds
    while t < end:
        sends += counter.reserve(10_000, t)
        t += max(0.0005, counter.wait_s(t)) + late_s
    return sends


def test_a_dispatcher_late_by_less_than_back_s_loses_nothing() -> None:
    # The log is self-clocked: a grant waits for the one qps before it to leave the window, so
    # a dispatcher 4 ms late to every freed grant lost 4 ms a window for good (150 QPS, 60 s:
    # 150 * 60 / 1.009 = 8 920 and the first burst); stamped back to when the grant was free,
    # nothing is lost (150 * 60 / 1.005 = 8 955).
    burst = QpsCounter(150).burst
    plain = _served_late(QpsCounter(150, window_s=1.005), 0.004, 60.0)
    back = _served_late(_BackDated(150, window_s=1.005), 0.004, 60.0)
    assert plain <= 150 * 60 / 1.009 + burst + 1
    assert back >= 150 * 60 / 1.005 - 1
    # Later than back_s: only what passes it is lost (2 ms a window, not 7).
    later = _served_late(_BackDated(150, window_s=1.005), 0.007, 60.0)
    assert 150 * 60 / 1.007 - 1 <= later <= 150 * 60 / 1.007 + burst + 1


def test_only_a_grant_the_log_held_back_is_back_dated() -> None:
    c = _BackDated(10, burst_s=1.0, window_s=1.005)
    t = 1_700_000_000.0
    assert c.reserve(10, t) == 10 and c.newest == t  # room to spare: stamped when made
    # The log is full until t + 1.005; served 3 ms late, the grant carries the time it was free.
    assert c.reserve(1, t + 1.008) == 1 and c.newest == t + 1.005
    # 7 ms late: back_s (5 ms) before it was made, no earlier.
    assert c.reserve(1, t + 2.017) == 1 and abs(c.newest - (t + 2.012)) < 1e-6
    # Long after the log last held it back (an idle group): stamped when made again.
    assert c.reserve(1, t + 9.0) == 1 and c.newest == t + 9.0


def test_a_grant_moved_to_a_write_told_late_goes_to_the_write_not_the_counters_clock() -> None:
    # A request written 20 ms after its grant's stamp and told 30 ms later (its answer), while
    # the dispatcher asked the counter meanwhile: moved to the write, less back_s. At the
    # counter's clock it would sit after the write, holding the grant a window later back.
    c = _BackDated(10, burst_s=0.0)
    t = 1_700_000_000.0
    assert c.reserve(1, t) == 1 and c.newest == t
    c.available(t + 0.05)  # (the dispatcher, meanwhile)
    assert c.restamp(t, t + 0.02) == t + 0.02 - c.back_s
    assert list(c._log) == [t + 0.02 - c.back_s]
    assert c.reserve(1, t + 0.15) == 1  # a newer grant: the next move is into the log's middle
    assert c.restamp(t + 0.02 - c.back_s, t + 0.03) == t + 0.03 - c.back_s
    assert list(c._log) == [t + 0.03 - c.back_s, t + 0.15]


@settings(max_examples=300, deadline=None)
@given(qps=st.integers(1, 40), steps=_steps(5), told=st.lists(st.floats(0, 0.05), min_size=1))
def test_grants_moved_to_writes_told_late_keep_every_window(
    qps: int, steps: list[tuple[float, int, int, int]], told: list[float]
) -> None:
    """Grants moved to a send that lies up to 50 ms before the counter's clock (told with the
    answer): never before the grant, never after the send, and every window within qps."""
    c = _BackDated(qps, burst_s=0.5)
    t = 1_700_000_000.25
    stamps: list[float] = []
    for n, (dt, want, back, move) in enumerate(steps):
        t += dt
        granted = c.reserve(want, t)
        stamps += [c.newest] * granted if granted else []
        back = min(back, granted)
        c.rollback(back, t)
        del stamps[len(stamps) - back :]
        for old in sorted(set(s for s in c._log if s > t - c.window_s))[:move]:
            sent = max(old, t - told[n % len(told)])
            stamps.remove(old)
            moved = c.restamp(old, sent)
            assert moved is not None and max(old, sent - c.back_s) == moved <= sent
            stamps.append(moved)
        stamps.sort()
        assert sorted(c._log) == list(c._log)
    assert _grants_in_any_window(stamps, c.window_s) <= qps


# --------------------------------------------------------------------------- spare lane
# (its bound on any window and on the pace: test_back_dated_grants_keep_every_window_...)


def test_a_spare_lane_covers_a_dispatcher_later_than_back_s() -> None:
    # 7 ms late to every freed grant, 2 ms past back_s: with exactly qps lanes each loses those
    # 2 ms a window (150 * 60 / 1.007); with one lane more the bucket sets the pace and the
    # group keeps its quota: 151 lanes of 1.007 s carry 149.95 a second.
    burst = QpsCounter(150).burst
    plain = _served_late(_BackDated(150, window_s=1.005), 0.007, 60.0)
    spare = _served_late(_Spare(150, window_s=1.005), 0.007, 60.0)
    assert plain <= 150 * 60 / 1.007 + burst + 1
    assert spare >= 151 * 60 / 1.007 - 1  # (9 000 here, against 8 941)
    assert spare <= 150 * 60 + burst  # the bucket: never above the quota


def test_a_quiet_counter_with_a_spare_lane_counts_the_former_owners_lane_too() -> None:
    c = _Spare(10, burst_s=0.1)
    t = 1_700_000_000.0
    c.quiet(t)
    assert len(c._log) == 10 + 1  # the former owner's worst case: qps + its spare lane
    assert c.reserve(1, t + 0.05) == 0  # nothing until its oldest leaves the window
