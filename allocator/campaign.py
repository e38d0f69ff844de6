"""Leadership on a fleet member: campaign while registered, lead while elected.

Use case: every registered member contends (:class:`~allocator.election.Election`); the one
elected runs a :class:`~allocator.leader.Leader`, which writes the assignment. States::

    WAITING (not registered) --registered--> CAMPAIGNING --elected--> LEADING
    LEADING or CAMPAIGNING --session lost, deposed, or a failure--> resign, back off, WAITING

The back-off grows with consecutive failures (a term ended by a lost session is not one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException  # type: ignore[import-untyped]

from allocator.election import Election
from allocator.leader import Deposed, Leader
from allocator.membership import Membership
from allocator.ownership import Ownership
from allocator.settings import FleetSettings
from emq.core.model import Namespace
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

RETRY_S = 0.5
MAX_BACKOFF_S = 5.0


class Campaign:
    """This member's part in leader election (see the module)."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        namespace: Namespace,
        worker_id: str,
        settings: FleetSettings,
        *,
        grace_s: float,
        membership: Membership,
        ownership: Ownership,
    ) -> None:
        self.id = worker_id
        self._client = client
        self._paths = paths
        self._ns = namespace
        self._settings = settings
        self._grace_s = grace_s
        self._membership = membership
        self._ownership = ownership
        self.is_leader = False
        self.leader: Leader | None = None

    async def run(self) -> None:
        failures = 0
        while True:
            await self._membership.registered.wait()
            lost = self._membership.lost
            election = Election(
                self._client,
                self._paths.leader(self._ns),
                self.id,
                request_timeout_s=self._settings.request_timeout_s,
            )
            term = asyncio.ensure_future(self._term(election))
            ended = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({term, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (term, ended):
                    t.cancel()
                await asyncio.gather(term, ended, return_exceptions=True)
                self.is_leader, self.leader = False, None
                with contextlib.suppress(KazooException):
                    await election.resign()
            failures = failures + 1 if term.done() and not term.cancelled() else 0
            if failures:
                log.warning("worker %s: leadership ended: %s", self.id, term.exception())
            await asyncio.sleep(min(MAX_BACKOFF_S, RETRY_S * 2 ** min(failures, 4)))

    async def _term(self, election: Election) -> None:
        node = await election.campaign()
        self.leader = Leader(
            self._client,
            self._paths,
            self._ns,
            self.id,
            node,
            self._settings,
            groups=lambda: self._ownership.group_names,
            topics_changed=self._ownership.topics_changed,
            grace_s=self._grace_s,
        )
        self.is_leader = True
        try:
            await self.leader.run()
        except Deposed:
            log.warning("worker %s was deposed as leader", self.id)
            raise
