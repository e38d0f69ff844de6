"""A group's ownership lifecycle: every legal transition, and every illegal one raises."""

from __future__ import annotations

import pytest

from emq.core.model import Namespace, Topic, TopicRef
from worker.groups import GroupState, IllegalTransition, Lifecycle, TopicState

L = Lifecycle
# Each transition method, the state it moves to, and the states it may start from.
MOVES = {
    "contest": (GroupState.contest, L.CONTESTED_WAIT, {L.CLAIMING}),
    "own": (GroupState.own, L.OWNED, {L.CLAIMING, L.CONTESTED_WAIT}),
    "abandon": (GroupState.abandon, L.RELEASED, {L.CONTESTED_WAIT}),
    "release": (GroupState.release, L.RELEASING, {L.OWNED}),
    "released": (GroupState.released, L.RELEASED, {L.RELEASING}),
    "drop": (GroupState.drop, L.DROPPED, {L.OWNED, L.RELEASING}),
}
# The shortest way from CLAIMING to each state.
PATH = {
    L.CLAIMING: [],
    L.CONTESTED_WAIT: ["contest"],
    L.OWNED: ["own"],
    L.RELEASING: ["own", "release"],
    L.RELEASED: ["own", "release", "released"],
    L.DROPPED: ["own", "drop"],
}


def group_in(state: Lifecycle) -> GroupState:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", "lifecycle"), 50, 1))
    g = GroupState(topic.ref.group(0), 1, topic, 50, [None, None, None])
    for move in PATH[state]:
        MOVES[move][0](g)
    assert g.state is state
    return g


@pytest.mark.parametrize("start", list(Lifecycle))
@pytest.mark.parametrize("move", list(MOVES))
def test_each_transition_is_legal_exactly_where_the_machine_has_it(
    start: Lifecycle, move: str
) -> None:
    g = group_in(start)
    method, to, legal_from = MOVES[move]
    if start in legal_from:
        method(g)
        assert g.state is to
    else:
        with pytest.raises(IllegalTransition, match=f"{start.name} -> {to.name}"):
            method(g)
        assert g.state is start  # a refused transition changes nothing


def test_a_group_given_up_in_its_contested_wait_is_released_without_serving() -> None:
    g = group_in(L.CONTESTED_WAIT)
    g.abandon()
    assert g.state is L.RELEASED and g.stopped and g.dropped


def test_stopped_and_dropped_are_views_of_the_state() -> None:
    views = {s: (group_in(s).stopped, group_in(s).dropped) for s in Lifecycle}
    assert views == {
        L.CLAIMING: (False, False),
        L.CONTESTED_WAIT: (False, False),
        L.OWNED: (False, False),
        L.RELEASING: (True, False),  # no fetching or dispatching; final writes still go out
        L.RELEASED: (True, True),
        L.DROPPED: (True, True),
    }
    g = group_in(L.OWNED)
    with pytest.raises(AttributeError):
        g.stopped = True  # type: ignore[misc]


def test_released_and_dropped_are_final() -> None:
    for final in (L.RELEASED, L.DROPPED):
        for method, _, _ in MOVES.values():
            g = group_in(final)
            with pytest.raises(IllegalTransition):
                method(g)
