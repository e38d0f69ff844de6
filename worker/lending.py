"""Lending between the groups of one topic that one worker owns.

A topic's quota is split over its groups (at most 150 QPS each), and a group's jobs are its
own: a key's jobs all go to the group the key hashes to, and a quota raise that adds groups
leaves the backlog where it was. A topic whose backlog sits in some of its groups would send
only those groups' shares, however much of its quota the others leave unused (three keys of a
1 000 QPS topic spread over seven groups: half the quota).

So a group that has used its own budget and still has jobs may take grants from the budget of a
sibling group (of the same topic, owned by the same worker) that has nothing buffered: each
grant is taken from, and logged in, the lender's own :class:`~capacity.rate.QpsCounter`. Every
counter keeps its own bound (no window of ``window_s`` holds more than its ``qps`` grants, plus
its spare lane with the lean client: worker.groups ``SpareLaneLog``), so the topic's sum over any
window stays within the sum of its groups' shares (plus one per group), exactly as without
lending, and no coordination is needed: a worker lends only what its own groups' shares allow,
so a fleet's sum is unchanged. A lender that gets jobs of its own stops lending at once; what it
lent in the last window counts against it, paced as its own sends would have been, so it goes on
at its own pace (no burst, as a group that was busy).

A job sent on a lent grant remembers the lender's counter (``Buffered.lent_by``): a late send
moves its stamp in that counter (worker.runtime ``_reserve_again``).

Lenders are looked for among at most ``SCAN`` siblings, from a place that moves on each time,
so a topic of hundreds of groups costs no more per dispatch than one of a few.
"""

from __future__ import annotations

from collections.abc import Iterator

from worker.groups import GroupState, Lifecycle

SCAN = 8  # siblings looked at per borrowing


def lenders(group: GroupState) -> Iterator[GroupState]:
    """The siblings of ``group`` that may lend now: owned here and serving, nothing buffered."""
    topic = group.topic
    ring = topic.lend_ring
    if len(ring) != len(topic.groups):  # groups came or went (one that went is skipped below)
        ring = topic.lend_ring = list(topic.groups.values())
    n = len(ring)
    if n < 2:
        return
    start = group.lend_from
    group.lend_from = start + 1
    for i in range(min(n, SCAN + 1)):
        sibling = ring[(start + i) % n]
        if sibling is not group and sibling.state is Lifecycle.OWNED and not sibling.buffered():
            yield sibling


def lend_wait_s(group: GroupState, wall: float, own: float) -> float:
    """When ``group`` may next send, its own budget's wait ``own`` or a lender's if sooner."""
    wait = own
    for sibling in lenders(group):
        wait = min(wait, sibling.counter.wait_s(wall))
        if wait <= 0:
            break
    return wait
