"""Where the workers' hints go: a table of each group's owner, for addressing ready signals and
due-index entries to the worker that will act on them.

Without it every put announced its groups on one shared stream that every worker read, so a
fleet of N workers read N times the signals it needed and a Redis Cluster carried them on one
key. With it a hint for a group goes to its owner's *inbox* (one stream and one due index per
worker, each with its own hash tag, so the inboxes spread over the Cluster's slots) and a worker
reads its own inbox plus the shared keys, which stay as the fallback: a writer that does not
know the owner (no fleet, a table not loaded yet, an owner that left) uses them, and so did every
writer before this layout existed, so a worker never misses what they hold.

A :class:`SignalRoutes` is filled by whoever knows the assignment (``allocator.routes`` follows
the fleet's assignment document on ZooKeeper) and read by the queue store on every hint: a dict
lookup, replaced whole on each change, so readers never see a half-built table.
"""

from __future__ import annotations

from collections.abc import Mapping

# Due hints (GroupOwner.watch_due): a worker that gets them looks at its due index when the
# earliest entry it read falls due, and at least this often; so a job parked for sooner than
# this ahead is announced to its owner (a field ``d`` on a ready signal), a later one is found
# by the owner's look before it falls due. Without hints a worker looks every DUE_POLL_S.
DUE_HINT_HORIZON_S = 1.0
DUE_POLL_S = 0.1


class SignalRoutes:
    """Group name (``str(GroupRef)``) -> the worker that owns it, as far as this process knows.

    A missing group (or an empty table) means "unknown": its hints go to the shared keys.
    """

    __slots__ = ("_owners", "version")

    def __init__(self, owners: Mapping[str, str] | None = None) -> None:
        self._owners: Mapping[str, str] = dict(owners or {})
        self.version = 0  # counts the replacements, for tests and benchmarks

    def owner(self, group: str) -> str | None:
        """The worker to address ``group``'s hints to, or None for the shared keys."""
        return self._owners.get(group)

    def replace(self, owners: Mapping[str, str]) -> None:
        """Switch to a new table at once (the caller orders the tables it hands in)."""
        self._owners = dict(owners)
        self.version += 1

    def __len__(self) -> int:
        return len(self._owners)
