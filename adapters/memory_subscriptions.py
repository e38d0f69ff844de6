"""An in-process :class:`~emq.core.subscriptions.SubscriptionStore` for unit tests and
single-process use: the Redis store's contract, in dictionaries (no retention of event records:
they are kept until the store is dropped)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from emq.core.errors import NotFound
from emq.core.refs import TopicRef
from emq.core.subscriptions import (
    EventRecord,
    Snapshot,
    Subscription,
    SubscriptionLimit,
    SubscriptionStore,
)


class MemorySubscriptionStore(SubscriptionStore):
    def __init__(self) -> None:
        self._subs: dict[TopicRef, dict[str, Subscription]] = {}
        self._versions: dict[TopicRef, int] = {}
        self._snapshots: dict[TopicRef, Snapshot] = {}
        self._events: dict[tuple[TopicRef, str], EventRecord] = {}

    def _changed(self, ref: TopicRef) -> None:
        self._versions[ref] = self._versions.get(ref, 0) + 1
        self._snapshots.pop(ref, None)

    async def create(self, ref: TopicRef, sub: Subscription, limit: int) -> None:
        subs = self._subs.setdefault(ref, {})
        if len(subs) >= limit:
            raise SubscriptionLimit(
                "subscription", f"topic {ref} already has {limit} subscriptions (the most)"
            )
        subs[sub.id] = sub
        self._changed(ref)

    async def list(self, ref: TopicRef) -> list[Subscription]:
        return sorted(self._subs.get(ref, {}).values(), key=lambda s: s.created_at)

    async def update(
        self, ref: TopicRef, sub_id: str, change: Callable[[Subscription], Subscription]
    ) -> Subscription:
        subs = self._subs.get(ref, {})
        if sub_id not in subs:
            raise NotFound(f"no subscription {sub_id} in topic {ref}")
        subs[sub_id] = new = change(subs[sub_id])
        self._changed(ref)
        return new

    async def delete(self, ref: TopicRef, sub_id: str) -> None:
        if self._subs.get(ref, {}).pop(sub_id, None) is None:
            raise NotFound(f"no subscription {sub_id} in topic {ref}")
        self._changed(ref)

    async def snapshot(self, ref: TopicRef) -> Snapshot:
        snap = self._snapshots.get(ref)
        if snap is None:
            snap = Snapshot(self._versions.get(ref, 0), list(self._subs.get(ref, {}).values()))
            self._snapshots[ref] = snap
        return snap

    def cached(self, ref: TopicRef) -> Snapshot | None:
        return self._snapshots.get(ref)

    async def record_events(self, ref: TopicRef, records: Sequence[EventRecord]) -> None:
        for r in records:
            known = self._events.get((ref, r.id))
            merged = {**known.deliveries, **r.deliveries} if known else dict(r.deliveries)
            first = known or r
            self._events[(ref, r.id)] = EventRecord(r.id, first.type, first.accepted_ms, merged)

    async def event(self, ref: TopicRef, event_id: str) -> EventRecord:
        try:
            return self._events[(ref, event_id)]
        except KeyError:
            raise NotFound(f"no event {event_id} in topic {ref}") from None
