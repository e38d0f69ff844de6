"""Order per key in the dispatcher (one job of a key in flight, parked jobs skip nobody else),
and a late job's quota grant moved to when it is sent (Worker._reserve_again)."""

from __future__ import annotations

import time

import orjson

from emq.core.interfaces import Offset
from emq.core.model import Namespace, Topic, TopicRef
from worker.dispatch import HELD_SCAN, PARKED_MIN, Dispatcher
from worker.groups import LATE_S, Buffered, GrantLog, GroupState, TopicState
from worker.keys import KeyLines
from worker.progress import Progress
from worker.runtime import Worker

WALL = 1_700_000_000.5


def group(name: str, qps: int = 1000, log: type[GrantLog] = GrantLog) -> GroupState:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", name), qps, 1), log_class=log)
    g = GroupState(topic.ref.group(0), 1, topic, qps, [None, None, None])
    topic.groups[0] = g
    return g


def fill(g: GroupState, keys: list[str | None], priority: int = 1) -> list[Buffered]:
    queue = g.ref.queues()[priority]
    buffer = g.filling()[priority]
    items = []
    for i, key in enumerate(keys):
        job: dict[str, object] = {"url": "http://x/", "body": str(i)}
        if key is not None:
            job["key"] = key
        payload = orjson.dumps({"id": f"{key}-{i}", "t": 0, "job": job})
        item = Buffered(queue, Offset(1, len(buffer)), payload, 0.0, Progress(Offset(0, 0)))
        buffer.append(item)
        items.append(item)
    return items


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Buffered] = []

    def __call__(self, g: GroupState, item: Buffered) -> None:
        g.topic.in_flight += 1
        self.sent.append(item)


def go(d: Dispatcher, g: GroupState, budget: int, wall: float) -> None:
    """One dispatch at ``wall`` with ``g`` due (the heap's clock is the real monotonic one)."""
    d.wake(g, 0.0)
    d.dispatch(budget, wall, time.monotonic() + 1000.0 + (wall - WALL) * 100)  # (past any delay)


def finish(d: Dispatcher, g: GroupState, item: Buffered) -> None:
    g.topic.in_flight -= 1
    d.keyed_done(g, item)


def test_one_job_of_a_key_in_flight_and_other_keys_go_past() -> None:
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("a")
    items = fill(g, ["k", "k", "j", None, "k", "j"])
    go(d, g, 100, WALL)
    # k-0, j-2 and the unkeyed job go; k-1, k-4 and j-5 are parked (out of the buffer).
    assert rec.sent == [items[0], items[2], items[3]]
    assert g.buffered() == 0 and g.keys is not None and g.keys.parked == 3
    finish(d, g, items[0])  # k's next goes back to the front of its buffer
    assert list(g.buffers[1]) == [items[1]]  # type: ignore[index]
    go(d, g, 100, WALL + 0.01)
    assert rec.sent[3:] == [items[1]]
    finish(d, g, items[2])
    finish(d, g, items[1])
    go(d, g, 100, WALL + 0.02)
    assert set(rec.sent[4:]) == {items[4], items[5]}  # each key in its own order
    finish(d, g, items[5])
    finish(d, g, items[4])
    assert len(g.keys) == 0 and g.keys.parked == 0


def test_unkeyed_jobs_never_make_key_lines() -> None:
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("b")
    fill(g, [None] * 50)
    go(d, g, 100, WALL)
    assert g.keys is None and len(rec.sent) > 0


def test_a_job_handed_back_unsent_stays_its_keys_next() -> None:
    """Worker._reserve_again puts a job back in its buffer (reserved_at = -1) and its push ends:
    the key stays held by it, the parked job behind it does not overtake it."""
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("c")
    items = fill(g, ["k", "k"])
    go(d, g, 100, WALL)
    assert rec.sent == [items[0]]
    g.buffers[1].appendleft(items[0])  # type: ignore[index]
    items[0].reserved_at = -1.0
    finish(d, g, items[0])
    assert list(g.buffers[1]) == [items[0]]  # type: ignore[index]
    go(d, g, 100, WALL + 0.5)
    assert rec.sent == [items[0], items[0]]
    finish(d, g, items[0])
    go(d, g, 100, WALL + 0.6)
    assert rec.sent[2:] == [items[1]]


def test_parked_jobs_are_bounded_and_the_rest_waits_in_its_buffer() -> None:
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("d", qps=10)
    items = fill(g, ["k"] * (PARKED_MIN + 50) + [None])
    g.counter.burst_s = 10.0  # (tokens for all of it at once)
    go(d, g, 10, WALL)
    assert rec.sent == [items[0]]
    assert g.keys is not None and g.keys.parked == PARKED_MIN
    assert g.buffered() == 50  # held at the head of the buffer: the fetcher sees them
    finish(d, g, items[0])
    go(d, g, 10, WALL + 0.2)
    assert rec.sent == [items[0], items[1]]


def test_key_lines_states() -> None:
    lines = KeyLines()
    a, b, c = object(), object(), object()
    assert lines.admit("k", a) is True
    assert lines.admit("k", b) is False and lines.admit("k", c, park=False) is None
    assert lines.done("k") is b
    assert lines.admit("k", c) is False  # only b may go next
    assert lines.admit("k", b) is True
    assert lines.done("k") is c and lines.admit("k", c) is True
    assert lines.done("k") is None and len(lines) == 0 and lines.parked == 0


def test_a_keys_parked_high_goes_before_its_parked_lows() -> None:
    # Lows of key k parked behind k's job in flight; a high of k fetched later parks behind
    # them, but leaves first: order per key is per priority, as in the buffers.
    lines = KeyLines()
    first, low1, low2, high, medium = (object() for _ in range(5))
    assert lines.admit("k", first, 2) is True
    assert [lines.admit("k", j, r) for j, r in ((low1, 2), (low2, 2), (high, 0), (medium, 1))] == [
        False
    ] * 4
    order = []
    while (nxt := lines.done("k")) is not None:
        order.append(nxt)
        assert lines.admit("k", nxt) is True  # (its turn: the rank no longer matters)
    assert order == [high, medium, low1, low2] and lines.parked == 0 and len(lines) == 0


# ------------------------------------------------------------------ Worker._reserve_again


class _Worker:
    """What Worker._reserve_again uses of its worker: the dispatcher."""

    def __init__(self) -> None:
        self.dispatcher = Dispatcher(Recorder(), 0.005)


def test_a_job_sent_late_moves_its_grant_to_its_send_time() -> None:
    g = group("late", qps=10)
    g.counter.burst_s = 1.0  # (the whole quota at once)
    (item,) = fill(g, [None])
    g.buffers[1].clear()  # type: ignore[index]
    assert g.counter.reserve(10, 100.0) == 10
    item.reserved_at = g.counter.newest  # (100.0 less LATE_S: stamped back, see GrantLog)
    assert Worker._reserve_again(_Worker(), g, item, 100.4)  # type: ignore[arg-type]
    assert item.reserved_at == 100.4 - LATE_S
    # The grant counts at its send (less LATE_S), where the receiver sees it: a window (1.015 s)
    # after the others, nine are free.
    assert g.counter.reserve(10, 101.02) == 9
    assert g.counter.reserve(10, 101.42) == 1


def test_a_job_a_second_late_without_budget_goes_back_to_its_buffer_in_offset_order() -> None:
    g = group("later", qps=10)
    g.counter.burst_s = 1.0
    first, item, last = fill(g, [None, None, None])
    g.buffers[1].remove(item)  # type: ignore[index]
    assert g.counter.reserve(1, 100.0) == 1  # the late job's grant
    item.reserved_at = g.counter.newest
    assert g.counter.reserve(9, 100.9) == 9
    assert g.counter.reserve(9, 101.1) == 1  # ten in the window up to 101.2: none left
    w = _Worker()
    assert not Worker._reserve_again(w, g, item, 101.2)  # type: ignore[arg-type]
    assert list(g.buffers[1]) == [first, item, last]  # type: ignore[index]
    assert item.reserved_at == -1.0 and g.scheduled  # woken: dispatched when budget comes


def test_a_held_head_passes_its_grant_to_the_lower_buffers() -> None:
    """Highs of one key parked to the limit, the next held at the head of the high buffer:
    what the highs were granted goes to the lows (the held high's key may have its next job
    there; before, the whole group stood still)."""
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("e", qps=10)
    highs = fill(g, ["j"] * (PARKED_MIN + 2), priority=0)
    lows = fill(g, [None] * 5, priority=2)
    g.counter.burst_s = 10.0
    go(d, g, 10, WALL)
    assert rec.sent == [highs[0], *lows]
    assert g.keys is not None and g.keys.ranks == [PARKED_MIN, 0, 0]
    assert list(g.buffers[0]) == [highs[-1]]  # type: ignore[index]


def test_parking_is_bounded_per_priority() -> None:
    """Lows parked to the limit do not hold a high of their key at its buffer's head: it parks
    ahead of them and goes next."""
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("f", qps=10)
    lows = fill(g, ["k"] * (PARKED_MIN + 1), priority=2)
    g.counter.burst_s = 10.0
    go(d, g, 10, WALL)
    assert rec.sent == [lows[0]] and g.keys is not None and g.keys.ranks == [0, 0, PARKED_MIN]
    (high,) = fill(g, ["k"], priority=0)
    go(d, g, 10, WALL + 0.1)
    assert g.keys.ranks == [1, 0, PARKED_MIN]  # parked, not held
    finish(d, g, lows[0])
    go(d, g, 10, WALL + 0.2)
    assert rec.sent == [lows[0], high]


def test_a_high_takes_the_turn_of_its_keys_next_low() -> None:
    """k's next job is a low, waiting in the low buffer behind the group's other work; a high of
    k arrives: it goes first (the low is parked again, first of its rank), instead of waiting
    until every medium of the group has gone (seen: a high waited 47 s so)."""
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("g", qps=10)
    g.counter.burst_s = 10.0
    first, low = fill(g, ["k", "k"], priority=2)
    go(d, g, 2, WALL)
    assert rec.sent == [first] and g.buffered() == 0  # and low parked
    finish(d, g, first)  # low is k's next, back in the low buffer
    mediums = fill(g, [None] * 3, priority=1)
    (high,) = fill(g, ["k"], priority=0)
    go(d, g, 2, WALL + 0.2)
    assert rec.sent == [first, high, mediums[0]]
    assert list(g.buffers[2]) == []  # type: ignore[index]
    finish(d, g, high)  # the low is k's next again
    go(d, g, 10, WALL + 0.4)
    assert rec.sent[3:] == [mediums[1], mediums[2], low]
    assert g.keys is not None and g.keys.parked == 0 and g.keys.ranks == [0, 0, 0]


def test_an_unkeyed_high_behind_a_held_one_goes_before_the_lows() -> None:
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("h", qps=10)
    highs = fill(g, ["j"] * (PARKED_MIN + 2) + [None], priority=0)
    lows = fill(g, [None] * 3, priority=2)
    g.counter.burst_s = 10.0
    go(d, g, 2, WALL)
    assert rec.sent == [highs[0], highs[-1]] and lows[0] not in rec.sent
    assert list(g.buffers[0]) == [highs[-2]]  # type: ignore[index]  # held, still first


def test_past_the_held_scan_the_lows_wait() -> None:
    """More held jobs than a dispatch looks past: jobs of their priority behind them may be
    able to go, so lower ones do not take the grant (strict priority)."""
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    g = group("i", qps=10)
    fill(g, ["j"] * (PARKED_MIN + 1 + HELD_SCAN) + [None], priority=0)
    lows = fill(g, [None] * 3, priority=2)
    g.counter.burst_s = 10.0
    go(d, g, 2, WALL)
    assert len(rec.sent) == 1 and lows[0] not in rec.sent
