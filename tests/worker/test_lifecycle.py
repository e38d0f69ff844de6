"""A group's ownership lifecycle: every legal transition, and every illegal one raises."""

from __future__ import annotations

import pytest

from emq.core.model import Namespace, Topic, TopicRef
from worker.groups import GroupState, IllegalTransition, Lifecycle, TopicState

L = Lifecycle
LEGAL = {
    (L.CLAIMING, L.CONTESTED_WAIT),
    (L.CLAIMING, L.OWNED),
    (L.CONTESTED_WAIT, L.OWNED),
    (L.OWNED, L.RELEASING),
    (L.RELEASING, L.RELEASED),
    (L.OWNED, L.DROPPED),
    (L.RELEASING, L.DROPPED),
}
MOVES = {
    L.CONTESTED_WAIT: GroupState.contest,
    L.OWNED: GroupState.own,
    L.RELEASING: GroupState.release,
    L.RELEASED: GroupState.released,
    L.DROPPED: GroupState.drop,
}
# The shortest way from CLAIMING to each state.
PATH = {
    L.CLAIMING: [],
    L.CONTESTED_WAIT: [L.CONTESTED_WAIT],
    L.OWNED: [L.OWNED],
    L.RELEASING: [L.OWNED, L.RELEASING],
    L.RELEASED: [L.OWNED, L.RELEASING, L.RELEASED],
    L.DROPPED: [L.OWNED, L.DROPPED],
}


def group_in(state: Lifecycle) -> GroupState:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", "lifecycle"), 50, 1))
    g = GroupState(topic.ref.group(0), 1, topic, 50, [None, None, None])
    for to in PATH[state]:
        MOVES[to](g)
    assert g.state is state
    return g


@pytest.mark.parametrize("start", list(Lifecycle))
@pytest.mark.parametrize("to", list(MOVES))
def test_each_transition_is_legal_exactly_where_the_machine_has_it(
    start: Lifecycle, to: Lifecycle
) -> None:
    g = group_in(start)
    if (start, to) in LEGAL:
        MOVES[to](g)
        assert g.state is to
    else:
        with pytest.raises(IllegalTransition, match=f"{start.name} -> {to.name}"):
            MOVES[to](g)
        assert g.state is start  # a refused transition changes nothing


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
        for move in MOVES.values():
            g = group_in(final)
            with pytest.raises(IllegalTransition):
                move(g)
