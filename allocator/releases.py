"""Handovers on a fleet member: the release markers it owes, the handovers it waits for.

Use case: the two sides of moving a group between workers, as one loop on the event loop.

* **Markers owed.** ``/released/<group>@<epoch>`` promises "this worker will never touch this
  group at this epoch again". It is written when the worker has released a group that the
  document no longer gives it at that epoch, when a document lists this worker as a former owner
  it does not touch (after a restart, say), and for everything when it leaves. Never for a group
  the document still gives it at that epoch: the worker may take it again after a self-fence.
* **Handovers awaited.** A group moved to this worker starts once its former owners settled
  (:class:`~allocator.handover.HandoverGate`); the gate's watches wake the loop, which then
  offers the worker a new snapshot.

States of a (group, epoch) this worker let go: DEFERRED (released, marker not yet due or not
yet written) --written--> MARKED (remembered while some document still refers to it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import NodeExistsError  # type: ignore[import-untyped]

from adapters import zk
from allocator.document import Document
from allocator.handover import HandoverGate
from allocator.ownership import Key, Ownership
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

RETRY_S = 0.5
SAFETY_RECHECK_S = 1.0  # watches normally wake us first


class Releases:
    """Release markers owed and handovers awaited (see the module)."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        worker_id: str,
        gate: HandoverGate,
        ownership: Ownership,
        *,
        request_timeout_s: float,
    ) -> None:
        self.id = worker_id
        self._client = client
        self._paths = paths
        self._ns = namespace
        self._gate = gate
        self._ownership = ownership
        self._timeout_s = request_timeout_s
        self.deferred: set[Key] = set()  # released while the document may still name us
        self._marked: set[Key] = set()
        self.wake = zk.Poke()

    def defer(self, key: Key) -> None:
        """The worker let ``key`` go; its marker is written when due."""
        self.deferred.add(key)
        self.wake.set()

    def on_document(self, doc: Document) -> None:
        self._marked &= doc.referenced()  # a marker nobody waits for need not be remembered
        self.wake.set()

    def leaving(self) -> list[Key]:
        """Every (group, epoch) to promise released when the member leaves, not yet marked."""
        own = self._ownership
        keys = set(self.deferred) | {(g, e.epoch) for g, e in own.mine.items()}
        return sorted((keys | own.waiting_on_me) - self._marked)

    async def run(self, connected: Callable[[], bool]) -> None:
        """Write due release markers; watch what pending handovers wait for; publish."""
        own = self._ownership
        timeout: float | None = None
        while True:
            await self.wake.wait(timeout)
            timeout = None
            if not connected():
                continue  # woken again on reconnection
            try:
                await self.write_markers(self._due_markers())
                pending = self._gate.pending(own.mine)
                if pending:
                    await self._gate.observe(pending, self.wake)
                    own.publish()
                    pending = self._gate.pending(own.mine)
            except BackendUnavailable as e:
                log.debug("worker %s: handover check failed: %s", self.id, e)
                timeout = RETRY_S
                continue
            own.publish()
            deadline = self._gate.next_deadline(pending)
            if deadline is not None:
                timeout = max(0.0, deadline - time.monotonic()) + 0.01
            elif pending:
                timeout = SAFETY_RECHECK_S

    def _due_markers(self) -> list[Key]:
        """(group, epoch) we do not touch, that the document no longer gives us, unmarked."""
        own = self._ownership
        due = []
        for key in (self.deferred | own.waiting_on_me) - self._marked:
            group, epoch = key
            entry = own.document.groups.get(group)
            still_ours = entry is not None and entry.owner == self.id and entry.epoch == epoch
            if key not in own.touching and not still_ours:
                due.append(key)
        return sorted(due)

    async def write_markers(self, keys: list[Key]) -> None:
        if not keys:
            return
        creates = [
            self._client.create_async(self._paths.release_marker(self._ns, g, e), b"")
            for g, e in keys
        ]
        outcomes = await zk.settle(creates, "writing release markers", self._timeout_s)
        failed = None
        for key, outcome in zip(keys, outcomes, strict=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, NodeExistsError):
                failed = outcome
                continue
            self._marked.add(key)
            self.deferred.discard(key)
        if failed is not None:  # a missing parent included: registration creates it again
            raise zk.unavailable(failed, "writing release markers")
        log.info("worker %s left release markers for %d group(s)", self.id, len(keys))
