"""When may a worker start a group that moved to it? The new owner's side of a handover.

An entry of the assignment lists the former owners that may still touch the group (``waits_for``,
see :mod:`allocator.document`). The new owner starts the group once each of them has *settled*:

* it is this worker itself and this worker no longer touches the group at that epoch;
* its release marker ``/released/<group>@<epoch>`` exists: it drained, checkpointed and let go;
* its running node has been gone, as this worker observed, for the grace period. The grace is at
  least the self-fence time: a former owner cut off from ZooKeeper stops dispatching that long
  after it last heard from ZooKeeper, and its node can only vanish after its session expired,
  which is later still. So after the grace it has stopped, even if it never noticed.

Observations are exists-calls with watches: a marker appearing or a node vanishing wakes the
gate at once, and the grace is a timer. A (group, epoch) that passed stays passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient  # type: ignore[import-untyped]

from adapters import zk
from allocator.document import Entry
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

Touching = Callable[[], frozenset[tuple[str, int]]]


class HandoverGate:
    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        me: str,
        *,
        grace_s: float,
        request_timeout_s: float,
        touching: Touching,
    ) -> None:
        self._client = client
        self._paths = paths
        self._ns = namespace
        self._me = me
        self._grace_s = grace_s
        self._timeout_s = request_timeout_s
        self._touching = touching
        self.passed: set[tuple[str, int]] = set()
        self._markers: set[tuple[str, int]] = set()  # seen to exist (they are never re-used)
        self._gone_since: dict[str, float] = {}  # worker -> when we first saw its node absent

    def ready(self, group: str, entry: Entry, now: float | None = None) -> bool:
        """True if this worker may start ``group`` at ``entry.epoch`` (from what it observed)."""
        key = (group, entry.epoch)
        if key in self.passed:
            return True
        now = time.monotonic() if now is None else now
        touching = self._touching()
        for worker, epoch in entry.waits_for:
            if worker == self._me:
                if (group, epoch) in touching:
                    return False
            elif (group, epoch) not in self._markers and not self._gone_long(worker, now):
                return False
        self.passed.add(key)
        return True

    def pending(self, mine: Mapping[str, Entry]) -> dict[str, Entry]:
        """The entries of ``mine`` that may not start yet."""
        now = time.monotonic()
        return {g: e for g, e in mine.items() if not self.ready(g, e, now)}

    async def observe(self, pending: Mapping[str, Entry], wake: zk.Poke) -> None:
        """Check the markers and running nodes the pending entries wait on (watches: ``wake``)."""
        markers = sorted(
            {(g, ep) for g, e in pending.items() for w, ep in e.waits_for if w != self._me}
            - self._markers
        )
        workers = sorted({w for e in pending.values() for w, _ in e.waits_for if w != self._me})
        calls = [
            self._client.exists_async(self._paths.release_marker(self._ns, g, ep), watch=wake)
            for g, ep in markers
        ] + [
            self._client.exists_async(self._paths.worker(self._ns, w), watch=wake) for w in workers
        ]
        outcomes = await zk.settle(calls, "checking handovers", self._timeout_s)
        stats = [zk.check(o, "checking handovers") for o in outcomes]
        now = time.monotonic()
        for key, stat in zip(markers, stats[: len(markers)], strict=True):
            if stat is not None:
                self._markers.add(key)
        for worker, stat in zip(workers, stats[len(markers) :], strict=True):
            if stat is None:
                self._gone_since.setdefault(worker, now)
            else:
                self._gone_since.pop(worker, None)

    def next_deadline(self, pending: Mapping[str, Entry]) -> float | None:
        """The monotonic time at which a grace period of a pending entry ends, if any."""
        ends = [
            self._gone_since[w] + self._grace_s
            for e in pending.values()
            for w, _ in e.waits_for
            if w in self._gone_since
        ]
        return min(ends) if ends else None

    def forget(self, current: Mapping[str, Entry]) -> None:
        """Drop what no longer matters (groups moved away or epochs superseded)."""
        keep = {(g, e.epoch) for g, e in current.items()}
        self.passed &= keep
        referenced = {(g, ep) for g, e in current.items() for _, ep in e.waits_for}
        self._markers &= referenced

    def _gone_long(self, worker: str, now: float) -> bool:
        since = self._gone_since.get(worker)
        return since is not None and now - since >= self._grace_s
